//! Passwords out of everything this crate prints: `Debug`, error messages and logs.

/// `url` with the password of its user-info part replaced by `***`:
/// `rediss://app:s3cret@host:6380/` → `rediss://app:***@host:6380/`. A URL without a password
/// is returned as it is.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    // The last `@`: a password may hold `/` or `@` (an unparseable URL is shown too), so
    // everything before it is user info; masking too much is the safe side.
    let Some(at) = rest.rfind('@') else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let masked = match user_info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        // `redis://password@host` (no colon): the whole user-info part may be the password.
        None => "***".to_owned(),
    };
    format!("{}{masked}{}", &url[..scheme_end], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
