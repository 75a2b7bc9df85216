//! Passwords out of everything this crate prints: `Debug`, error messages and logs.

/// `url` with the password of its user-info part replaced by `***`:
/// `rediss://app:s3cret@host:6380/` → `rediss://app:***@host:6380/`. A URL without a password
/// is returned as it is.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let user = user_info
        .split_once(':')
        .map_or(user_info, |(user, _)| user);
    let password_given = user_info.contains(':') || user.is_empty();
    let masked = if password_given {
        format!("{user}:***")
    } else {
        // `redis://password@host` (no colon): the whole user-info part is the password.
        "***".to_owned()
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
            ("redis://a:b:c@h/x@y", "redis://a:***@h/x@y"),
            ("redis://127.0.0.1:6380/", "redis://127.0.0.1:6380/"),
            ("not a url", "not a url"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }
}
