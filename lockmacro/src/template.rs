//! Key templates: `"order:lock:product:<product_id>"`.
//!
//! Grammar:
//! - `<name>` or `<name.field.field>` is a placeholder; `name` is a parameter or `self`, each
//!   field is an identifier or a tuple index (`<pair.0>`);
//! - `<<` is a literal `<`;
//! - every other character is literal, `>`, `{` and `}` included.
//!
//! Checking the placeholder names against the function's parameters happens in `expand`, which
//! knows the signature; this module only knows the string.

use crate::diagnostics;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Text copied into the key as is.
    Literal(String),
    /// `<a.b.c>` as `["a", "b", "c"]`; never empty.
    Placeholder(Vec<String>),
}

/// Why a template is rejected; [`TemplateError::message`] gives the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TemplateError {
    Empty,
    Unclosed,
    EmptyPlaceholder,
    /// The text between `<` and `>`.
    Malformed(String),
}

impl TemplateError {
    pub(crate) fn message(&self) -> String {
        match self {
            TemplateError::Empty => diagnostics::TEMPLATE_EMPTY.to_owned(),
            TemplateError::Unclosed => diagnostics::TEMPLATE_UNCLOSED.to_owned(),
            TemplateError::EmptyPlaceholder => diagnostics::TEMPLATE_EMPTY_PLACEHOLDER.to_owned(),
            TemplateError::Malformed(text) => diagnostics::template_malformed(text),
        }
    }
}

/// Splits `template` into literal text and placeholders. Adjacent literal text is merged.
pub(crate) fn parse(template: &str) -> Result<Vec<Segment>, TemplateError> {
    if template.is_empty() {
        return Err(TemplateError::Empty);
    }
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('<') {
        literal.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        if let Some(escaped) = after.strip_prefix('<') {
            literal.push('<');
            rest = escaped;
            continue;
        }
        let close = after.find('>').ok_or(TemplateError::Unclosed)?;
        let placeholder = placeholder(&after[..close])?;
        if !literal.is_empty() {
            segments.push(Segment::Literal(std::mem::take(&mut literal)));
        }
        segments.push(Segment::Placeholder(placeholder));
        rest = &after[close + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    Ok(segments)
}

/// The `format!` string for `segments`: a `{}` per placeholder, literal braces doubled.
pub(crate) fn format_string(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Literal(text) => {
                out.push_str(&text.replace('{', "{{").replace('}', "}}"));
            }
            Segment::Placeholder(_) => out.push_str("{}"),
        }
    }
    out
}

/// `a.b.0` → `["a", "b", "0"]`. The first segment must be an identifier; later ones may also be
/// tuple indices.
fn placeholder(text: &str) -> Result<Vec<String>, TemplateError> {
    if text.is_empty() {
        return Err(TemplateError::EmptyPlaceholder);
    }
    let malformed = || TemplateError::Malformed(text.to_owned());
    let mut path = Vec::new();
    for (i, part) in text.split('.').enumerate() {
        let valid = is_identifier(part) || (i > 0 && is_tuple_index(part));
        if !valid {
            return Err(malformed());
        }
        path.push(part.to_owned());
    }
    Ok(path)
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) if first == '_' || first.is_alphabetic() => {
            s != "_" && chars.all(|c| c == '_' || c.is_alphanumeric())
        }
        _ => false,
    }
}

fn is_tuple_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.to_owned())
    }

    fn ph(path: &[&str]) -> Segment {
        Segment::Placeholder(path.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn plain_text_is_one_literal() {
        assert_eq!(parse("order:lock"), Ok(vec![lit("order:lock")]));
    }

    #[test]
    fn placeholder_between_literals() {
        assert_eq!(
            parse("order:lock:product:<product_id>"),
            Ok(vec![lit("order:lock:product:"), ph(&["product_id"])])
        );
        assert_eq!(parse("<a>:<b>"), Ok(vec![ph(&["a"]), lit(":"), ph(&["b"])]));
        assert_eq!(parse("<a><b>"), Ok(vec![ph(&["a"]), ph(&["b"])]));
    }

    #[test]
    fn nested_fields_and_tuple_indices() {
        assert_eq!(parse("<order.id>"), Ok(vec![ph(&["order", "id"])]));
        assert_eq!(
            parse("o:<self.tenant.name>"),
            Ok(vec![lit("o:"), ph(&["self", "tenant", "name"])])
        );
        assert_eq!(parse("<pair.0>"), Ok(vec![ph(&["pair", "0"])]));
        assert_eq!(parse("<pair.10>"), Ok(vec![ph(&["pair", "10"])]));
    }

    #[test]
    fn double_lt_is_a_literal_lt() {
        assert_eq!(parse("a<<b"), Ok(vec![lit("a<b")]));
        assert_eq!(parse("<<<id>"), Ok(vec![lit("<"), ph(&["id"])]));
        assert_eq!(parse("<<id>"), Ok(vec![lit("<id>")]));
        assert_eq!(parse("<<"), Ok(vec![lit("<")]));
    }

    #[test]
    fn gt_and_braces_are_literal() {
        assert_eq!(parse("a>b"), Ok(vec![lit("a>b")]));
        assert_eq!(
            parse("{user:<id>}:cart"),
            Ok(vec![lit("{user:"), ph(&["id"]), lit("}:cart")])
        );
    }

    #[test]
    fn non_ascii_text_and_names() {
        assert_eq!(
            parse("café:<naïve>"),
            Ok(vec![lit("café:"), ph(&["naïve"])])
        );
    }

    #[test]
    fn errors() {
        assert_eq!(parse(""), Err(TemplateError::Empty));
        assert_eq!(parse("order:<id"), Err(TemplateError::Unclosed));
        assert_eq!(parse("<"), Err(TemplateError::Unclosed));
        assert_eq!(parse("a<>b"), Err(TemplateError::EmptyPlaceholder));
        for bad in [
            "a..b", "1x", "a.", ".a", "a b", "_", "a-b", "0", "a.01", "a.b-c", "a<b", "self.",
        ] {
            assert_eq!(
                parse(&format!("k:<{bad}>")),
                Err(TemplateError::Malformed(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn underscore_names_are_identifiers() {
        assert_eq!(parse("<_id>"), Ok(vec![ph(&["_id"])]));
        assert_eq!(parse("<a._b>"), Ok(vec![ph(&["a", "_b"])]));
    }

    #[test]
    fn format_string_doubles_braces() {
        let segments = parse("{user:<id>}:cart").unwrap_or_default();
        assert_eq!(format_string(&segments), "{{user:{}}}:cart");
        let segments = parse("a<<b:<x.y>").unwrap_or_default();
        assert_eq!(format_string(&segments), "a<b:{}");
    }

    #[test]
    fn messages() {
        assert_eq!(TemplateError::Empty.message(), "key template is empty");
        assert!(
            TemplateError::Malformed("a..b".into())
                .message()
                .contains("`<a..b>`")
        );
    }
}

/// Fuzzed templates (proptest, with shrinking): no input panics, every rejection is one of the
/// four errors with its message, and a template written from segments parses back to them.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;

    /// Text built from the characters the grammar cares about, and some that it does not.
    fn template_text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("<".to_owned()),
                Just(">".to_owned()),
                Just("<<".to_owned()),
                Just(".".to_owned()),
                Just("{".to_owned()),
                Just("}".to_owned()),
                Just("_".to_owned()),
                "[a-z0-9]{1,3}",
                "\\PC",
            ],
            0..12,
        )
        .prop_map(|parts| parts.concat())
    }

    fn identifier() -> impl Strategy<Value = String> {
        "[a-zA-Z_][a-zA-Z0-9_]{0,6}".prop_filter("`_` alone is not a name", |s| s != "_")
    }

    fn segment() -> impl Strategy<Value = Segment> {
        prop_oneof![
            "[^<]{1,8}".prop_map(Segment::Literal),
            (identifier(), proptest::collection::vec(identifier(), 0..3)).prop_map(
                |(first, rest)| {
                    let mut path = vec![first];
                    path.extend(rest);
                    Segment::Placeholder(path)
                }
            ),
        ]
    }

    /// Adjacent literals merged, as `parse` returns them.
    fn merged(segments: Vec<Segment>) -> Vec<Segment> {
        let mut out: Vec<Segment> = Vec::new();
        for segment in segments {
            match (out.last_mut(), segment) {
                (Some(Segment::Literal(last)), Segment::Literal(text)) => last.push_str(&text),
                (_, segment) => out.push(segment),
            }
        }
        out
    }

    fn written(segments: &[Segment]) -> String {
        segments
            .iter()
            .map(|s| match s {
                Segment::Literal(text) => text.replace('<', "<<"),
                Segment::Placeholder(path) => format!("<{}>", path.join(".")),
            })
            .collect()
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_rejected_with_a_message(text in template_text()) {
            match parse(&text) {
                Ok(segments) => {
                    prop_assert!(!segments.is_empty());
                    let placeholders = segments
                        .iter()
                        .filter(|s| matches!(s, Segment::Placeholder(_)))
                        .count();
                    prop_assert_eq!(format_string(&segments).matches("{}").count() >= placeholders, true);
                }
                Err(error) => {
                    let message = error.message();
                    prop_assert!(message.starts_with(|c: char| c.is_lowercase()), "{}", message);
                    prop_assert!(!message.ends_with('.'), "{}", message);
                    match &error {
                        TemplateError::Empty => prop_assert!(text.is_empty()),
                        TemplateError::Unclosed => prop_assert!(message.contains("`<<`")),
                        TemplateError::EmptyPlaceholder => {
                            prop_assert!(text.contains("<>"));
                            prop_assert!(message.contains("e.g."));
                        }
                        TemplateError::Malformed(inner) => {
                            let quoted = format!("`<{inner}>`");
                            prop_assert!(message.contains(&quoted), "{}", message);
                            prop_assert!(message.contains("expected"), "{}", message);
                        }
                    }
                }
            }
        }

        #[test]
        fn written_segments_parse_back(segments in proptest::collection::vec(segment(), 1..6)) {
            let text = written(&segments);
            prop_assert_eq!(parse(&text), Ok(merged(segments)), "{}", text);
        }
    }
}
