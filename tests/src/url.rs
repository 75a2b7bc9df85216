//! Connection URLs with credentials.

/// `SCHEME://USER:PASSWORD@HOST:PORT/`, user and password percent-encoded
/// (everything but RFC 3986 unreserved characters).
pub(crate) fn user_url(scheme: &str, host: &str, port: u16, user: &str, password: &str) -> String {
    format!(
        "{scheme}://{}:{}@{host}:{port}/",
        percent_encode(user),
        percent_encode(password)
    )
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Redis URLs of every form, well-formed and malformed, that carry `secret` where a password
/// goes, with `port` where a port goes: for sweeps that assert the secret is never printed.
pub fn secret_url_forms(secret: &str, port: u16) -> Vec<String> {
    let p = secret;
    vec![
        format!("redis://app:{p}@127.0.0.1:{port}/"),
        format!("redis://:{p}@127.0.0.1:{port}/"),
        format!("redis://{p}@127.0.0.1:{port}/"),
        format!("rediss://app:{p}@127.0.0.1:{port}/"),
        format!("rediss://app:{p}@127.0.0.1:{port}/#insecure"),
        format!("redis:/app:{p}@127.0.0.1:P/"),
        format!("redis:/app:{p}@127.0.0.1:{port}/"),
        format!("redis:app:{p}@127.0.0.1:{port}/"),
        format!("redis//app:{p}@127.0.0.1:{port}/"),
        format!("app:{p}@127.0.0.1:{port}"),
        format!("{p}@127.0.0.1:{port}"),
        format!("redis://app:{p}@"),
        "@".to_owned(),
        format!("redis://app:{p}@127.0.0.1:notaport/"),
        format!("redis://app:{p}127.0.0.1:{port}/"),
        format!("redis://app:{p}@127.0.0.1:{port}/x"),
        format!("redis+unix:///nonexistent/redis.sock?pass={p}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_reserved_characters() {
        assert_eq!(
            user_url("redis", "127.0.0.1", 7000, "app", "s3cret"),
            "redis://app:s3cret@127.0.0.1:7000/"
        );
        assert_eq!(
            user_url("rediss", "localhost", 1, "a b", "p@ss:/"),
            "rediss://a%20b:p%40ss%3A%2F@localhost:1/"
        );
    }
}
