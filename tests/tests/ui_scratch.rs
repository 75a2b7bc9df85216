#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for f in std::env::var("UI_FILES")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
    {
        if f.contains("/pass/") {
            t.pass(f)
        } else {
            t.compile_fail(f)
        }
    }
}
