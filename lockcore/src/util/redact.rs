//! Passwords out of everything this crate (and `lockctl`) prints: `Debug`, error messages and
//! logs.

/// The URL schemes redis-rs knows; anything else before a `:` may be a user name or a password.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// What stands in for masked text.
const MASK: &str = "***";

/// `url` with whatever could be a credential replaced by `***`, for messages and logs. Any
/// string given as a Redis URL may be passed, well-formed or not.
///
/// - A well-formed `scheme://user:password@host/` keeps its user name:
///   `rediss://app:s3cret@host:6380/` → `rediss://app:***@host:6380/`.
/// - Otherwise everything between the scheme (`redis:`, `redis:/`, `redis://`, ...) and the
///   last `@` is masked, or everything before the last `@` when there is no known scheme:
///   `redis:/app:s3cret@host/` → `redis:/***@host/`, `app:s3cret@host` → `***@host`.
/// - Without an `@`, an authority that is not `host` or `host:port` (a forgotten `@`, as in
///   `redis://app:s3cret` + `host`) is masked: `redis://***/`.
/// - Query values are masked (`redis+unix:///run/redis.sock?pass=***`); the fragment is kept.
///
/// Masking too much is the safe side: the text is for people, never parsed back.
///
/// ```
/// use lockcore::redact_url;
///
/// assert_eq!(redact_url("rediss://app:s3cret@db:6380/"), "rediss://app:***@db:6380/");
/// assert_eq!(redact_url("redis:/app:s3cret@db:6380/"), "redis:/***@db:6380/");
/// assert_eq!(redact_url("redis://127.0.0.1:6380/0"), "redis://127.0.0.1:6380/0");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        // No user info: only a malformed authority can hide a credential.
        let (prefix, rest) = url.split_at(scheme_len(url));
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, rest) = rest.split_at(authority_end);
        let mut shown = String::with_capacity(url.len());
        shown.push_str(prefix);
        shown.push_str(if is_host_port(authority) {
            authority
        } else {
            MASK
        });
        push_masking_query(&mut shown, rest);
        return shown;
    };
    let (head, tail) = url.split_at(at);
    let mut shown = String::with_capacity(url.len() + MASK.len());
    let (prefix, user_info) = head.split_at(scheme_len(head));
    shown.push_str(prefix);
    match user_info.split_once(':') {
        // `scheme://user:password@`: the user name is no secret, and helps with ACL errors.
        Some((user, _)) if prefix.ends_with("://") && is_plain_user(user) => {
            shown.push_str(user);
            shown.push(':');
        }
        _ => {}
    }
    shown.push_str(MASK);
    push_masking_query(&mut shown, tail);
    shown
}

/// The length of a known scheme at the start of `text` with its `:` and any `/` after it
/// (`redis://`, `redis:/`, `redis:`), case-insensitive; 0 when there is none.
fn scheme_len(text: &str) -> usize {
    let Some(colon) = text.find(':') else {
        return 0;
    };
    if !SCHEMES
        .iter()
        .any(|scheme| scheme.eq_ignore_ascii_case(&text[..colon]))
    {
        return 0;
    }
    let slashes = text[colon + 1..].bytes().take_while(|&b| b == b'/').count();
    colon + 1 + slashes
}

/// `host`, `host:port` or `[v6]:port`: nothing that could be a credential.
fn is_host_port(authority: &str) -> bool {
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.starts_with('[') || host.ends_with(']') => (host, Some(port)),
        _ => (authority, None),
    };
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.'),
        None => !host.contains(':'),
    };
    host_ok && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A user name as a well-formed URL carries it (no separator, space or control character).
fn is_plain_user(user: &str) -> bool {
    !user.contains(['/', '?', '#', '@', '[', ']'])
        && !user.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Appends `rest` (`/path?query#fragment`) with every query value masked.
fn push_masking_query(out: &mut String, rest: &str) {
    let Some(question) = rest.find('?') else {
        out.push_str(rest);
        return;
    };
    let (path, query) = rest.split_at(question + 1);
    out.push_str(path);
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    for (i, pair) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match pair.split_once('=') {
            Some((name, _)) => {
                out.push_str(name);
                out.push('=');
                out.push_str(MASK);
            }
            None => out.push_str(pair),
        }
    }
    out.push_str(fragment);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "S3CRETpw42";

    #[test]
    fn passwords_are_masked_and_nothing_else_changes() {
        for (url, shown) in [
            (
                "rediss://app:s3cret@host:6380/",
                "rediss://app:***@host:6380/",
            ),
            (
                "redis://:s3cret@127.0.0.1:7000/0",
                "redis://:***@127.0.0.1:7000/0",
            ),
            ("redis://s3cret@h:1", "redis://***@h:1"),
            ("redis://a:b:c@h/x", "redis://a:***@h/x"),
            (
                "redis://app:Zx/9q+Lw@host:6380/",
                "redis://app:***@host:6380/",
            ),
            ("redis://app:p@ss@host/", "redis://app:***@host/"),
            ("redis://127.0.0.1:6380/", "redis://127.0.0.1:6380/"),
            ("redis://[::1]:6380/", "redis://[::1]:6380/"),
            ("rediss://h:1/#insecure", "rediss://h:1/#insecure"),
            ("redis://h:1/?protocol=resp3", "redis://h:1/?protocol=***"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    /// Malformed forms, each carrying the secret: it never shows, and what is left still
    /// says where the URL went wrong.
    #[test]
    fn no_form_of_url_shows_the_secret() {
        let p = SECRET;
        let forms = [
            format!("redis:/app:{p}@127.0.0.1:P/"),
            format!("redis:app:{p}@127.0.0.1:6379/"),
            format!("redis//app:{p}@127.0.0.1:6379/"),
            format!("redis:///app:{p}@127.0.0.1:6379/"),
            format!("REDIS://app:{p}@127.0.0.1:6379/"),
            format!("app:{p}@127.0.0.1:6379"),
            format!("{p}:x@127.0.0.1:6379"),
            format!("{p}@127.0.0.1"),
            format!("//app:{p}@127.0.0.1"),
            format!(":{p}@"),
            format!("redis://{p}@/"),
            format!("redis://app:{p}127.0.0.1:6379/"),
            format!("redis://{p}:{p}"),
            format!("redis://app:{p}@127.0.0.1:notaport/"),
            format!("redis://app:{p}@"),
            format!("redis://app:{p} @host/"),
            format!("redis://app:{p}@host@other:1/"),
            format!("redis+unix:///run/redis.sock?db=1&pass={p}"),
            format!("unix:///run/redis.sock?pass={p}#x"),
            format!("http://u:{p}@h/"),
            format!("rediss://app:{p}@h:1/#insecure"),
            format!("redis://app:{p}\n@h/"),
            format!("redis://ap\u{1b}p:{p}@h/"),
        ];
        for url in &forms {
            let shown = redact_url(url);
            assert!(!shown.contains(p), "{url:?} shown as {shown:?}");
            assert!(shown.contains(MASK), "{url:?} shown as {shown:?}");
        }
        assert_eq!(redact_url("@"), "***@");
        assert_eq!(redact_url(""), "");
        assert_eq!(redact_url(&forms[0]), "redis:/***@127.0.0.1:P/");
        assert_eq!(redact_url(&forms[1]), "redis:***@127.0.0.1:6379/");
        assert_eq!(redact_url(&forms[2]), "***@127.0.0.1:6379/");
    }
}
