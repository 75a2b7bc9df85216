// The error type most UI cases return: `E: From<LockError>`, as the attribute requires.
// Included with `include!("../app_error.rs")`; the including file imports `LockError`.

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}
