//! The one table type of the report: a header, rows of text cells, rendered as markdown.

/// A markdown table.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names, separated by `|`: `"implementation | p50"`.
    pub(crate) fn new(header: &str) -> Table {
        Table {
            header: header.split('|').map(|h| h.trim().to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells render empty, extra cells are dropped.
    pub(crate) fn push_row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// A row for an implementation that has no figures: its name, then why.
    pub(crate) fn push_failed(&mut self, name: &str, why: &str) {
        self.push_row([name.to_owned(), format!("n/a: {}", short(why))]);
    }

    /// The table as markdown, followed by an empty line. `|` and line breaks in cells are
    /// replaced so that every cell stays one cell.
    pub(crate) fn render(&self, out: &mut String) {
        let width = self.header.len();
        let mut line = |cells: Vec<String>| {
            out.push_str("| ");
            out.push_str(&cells.join(" | "));
            out.push_str(" |\n");
        };
        line(self.header.iter().map(|h| cell(h)).collect());
        line(vec!["---".to_owned(); width]);
        for row in &self.rows {
            line(
                (0..width)
                    .map(|i| row.get(i).map_or_else(String::new, |c| cell(c)))
                    .collect(),
            );
        }
        out.push('\n');
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "/").replace('\n', " ")
}

/// An error message short enough for a table cell.
pub(crate) fn short(e: &str) -> String {
    if e.chars().count() > 80 {
        let cut: String = e.chars().take(77).collect();
        format!("{cut}...")
    } else {
        e.to_owned()
    }
}

/// "0" or "3 (first error)" for an errors column.
pub(crate) fn errors(n: u64, first: Option<&String>) -> String {
    first.map_or_else(|| n.to_string(), |e| format!("{n} ({})", short(e)))
}
