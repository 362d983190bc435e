//! LaTeX escaping: every `{{ … }}` of a `.tex` template goes through [`Tex`] (see
//! `askama.toml`), so model outputs, ids and labels print literally and can neither run
//! nor include anything (`\input{/etc/passwd}`, `\write18{…}`, `^^5c` input tricks).
//!
//! The output compiles with plain pdflatex in the default OT1 encoding (no font packages
//! needed): specials become text commands, common Latin letters and typographic marks map
//! to LaTeX, and any other character prints as its code point, `[U+1F600]`, because an
//! undeclared Unicode character is a pdflatex error.

use std::fmt::{self, Write};

/// The askama escaper for `.tex` templates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tex;

impl askama::filters::Escaper for Tex {
    fn write_escaped_str<W: Write>(&self, mut dest: W, string: &str) -> fmt::Result {
        for c in string.chars() {
            write_char(&mut dest, c)?;
        }
        Ok(())
    }
}

/// Escapes `text` for LaTeX body text (also usable inside TikZ node text).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        write_char(&mut out, c).expect("writing to a String cannot fail");
    }
    out
}

fn write_char<W: Write>(dest: &mut W, c: char) -> fmt::Result {
    // Every command ends with `{}` so that a following letter cannot extend its name.
    let replacement = match c {
        '\\' => "\\textbackslash{}",
        '{' => "\\{",
        '}' => "\\}",
        // `\$` is the TS1 dollar since LaTeX 2020: a bitmap font built by mktexpk at compile
        // time. The math-mode dollar comes from the default fonts.
        '$' => "\\ensuremath{\\mathdollar}",
        '&' => "\\&",
        '%' => "\\%",
        '#' => "\\#",
        '_' => "\\_",
        '^' => "\\textasciicircum{}",
        '~' => "\\textasciitilde{}",
        '<' => "\\textless{}",
        '>' => "\\textgreater{}",
        '|' => "\\textbar{}",
        // Braced so that text after `\\` or `\item` is never read as an optional argument.
        '[' => "{[}",
        ']' => "{]}",
        // OT1 has no straight double quote; this is its closest text form.
        '"' => "{''}",
        // Separate dashes and quotes so that TeX's ligatures (`--`, `''`, `!``) keep the
        // characters as typed.
        '-' => "-{}",
        '\'' => "{'}",
        '`' => "{`}",
        '!' => "!{}",
        '?' => "?{}",
        '\n' | '\r' | '\t' => " ",
        '\u{2018}' => "`",
        '\u{2019}' => "'",
        '\u{201C}' => "``",
        '\u{201D}' => "''",
        '\u{2013}' => "--",
        '\u{2014}' => "---",
        '\u{2026}' => "\\ldots{}",
        '\u{00A0}' => "~",
        '\u{00D7}' => "\\ensuremath{\\times}",
        '\u{2264}' => "\\ensuremath{\\le}",
        '\u{2265}' => "\\ensuremath{\\ge}",
        '\u{00B1}' => "\\ensuremath{\\pm}",
        '\u{2192}' => "\\ensuremath{\\rightarrow}",
        '\u{0394}' => "\\ensuremath{\\Delta}",
        'é' => "\\'e",
        'è' => "\\`e",
        'ê' => "\\^e",
        'ë' => "\\\"e",
        'á' => "\\'a",
        'à' => "\\`a",
        'â' => "\\^a",
        'ä' => "\\\"a",
        'í' => "\\'i",
        'î' => "\\^i",
        'ï' => "\\\"i",
        'ó' => "\\'o",
        'ô' => "\\^o",
        'ö' => "\\\"o",
        'ú' => "\\'u",
        'û' => "\\^u",
        'ü' => "\\\"u",
        'ç' => "\\c{c}",
        'ñ' => "\\~n",
        'É' => "\\'E",
        'Ä' => "\\\"A",
        'Ö' => "\\\"O",
        'Ü' => "\\\"U",
        'ß' => "\\ss{}",
        c if c.is_ascii_graphic() || c == ' ' => return dest.write_char(c),
        c => return write!(dest, "[U+{:04X}]", c as u32),
    };
    dest.write_str(replacement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_are_literal() {
        assert_eq!(
            escape(r"\input{/etc/passwd}"),
            r"\textbackslash{}input\{/etc/passwd\}"
        );
        assert_eq!(
            escape("$&%#_^~"),
            r"\ensuremath{\mathdollar}\&\%\#\_\textasciicircum{}\textasciitilde{}"
        );
        assert_eq!(escape("^^5c"), r"\textasciicircum{}\textasciicircum{}5c");
        assert_eq!(escape("a\nb"), "a b");
        assert_eq!(escape("Café 😀"), r"Caf\'e [U+1F600]");
        assert_eq!(escape("--"), "-{}-{}");
    }
}
