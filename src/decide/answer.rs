//! The answer parser of tests 10–12: Yes/No or a class name, else invalid.
//!
//! The models are asked for one short answer (4 tokens at most), so the answer must be the
//! first answer-like token of the output:
//! - leading whitespace, punctuation, quotes and markdown are skipped (`**No**`, `"yes"`,
//!   `- Yes`, `` `setosa` ``), as are HTML-like tags and special tokens (`<b>`, `</s>`,
//!   `<|eot_id|>`), and one leading `Answer:` label (the prompts' own answer format);
//! - the token must begin with a choice, compared case-insensitively, and the choice must end
//!   there (`Yes.` and `Yes,` are answers; `Yesterday`, `No-one` and `0.5` are not);
//! - an output that names a second, different choice anywhere as a whole word is invalid
//!   (`Yes/No`, `Yes or no`, `No. Yes`, `setosa|virginica`): SPEC §2 counts a membership
//!   answer only when the expected word appears and the other does not, as the authors' code
//!   did, and the same holds for the class names of tests 11–12 (`0.5` or `14.2` do not name
//!   class `2`: a digit inside a number is not a word);
//! - a hedged or worded answer (`I think yes`, `The answer is no`) is invalid: reading
//!   further would turn "cannot decide" outputs into guesses, and the paper reports invalid
//!   answers separately rather than second-guessing them.
//!
//! Choices may hold spaces or punctuation (`<=50K`, `class 1`); the longest choice that fits
//! wins, so `class 10` is not read as `class 1`.

/// A parsed short answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Answer {
    /// Index into the admissible answers.
    Valid(usize),
    /// No admissible answer found: counts as wrong, reported separately.
    Invalid,
}

/// A label some models print before the answer; skipped once when followed by `:`.
const ANSWER_LABEL: &str = "answer";

/// Finds which of `choices` the output answers (case-insensitive, first answer-like token).
pub fn parse_answer(output: &str, choices: &[String]) -> Answer {
    let choices: Vec<String> = choices
        .iter()
        .map(|choice| choice.trim().to_lowercase())
        .collect();
    if choices.iter().all(String::is_empty) {
        return Answer::Invalid;
    }
    let text = remove_tags(&output.to_lowercase());
    let Some(mut start) = first_answer_like_token(&text, 0) else {
        return Answer::Invalid;
    };
    if let Some(after_label) = skip_label(&text, start, &choices) {
        match first_answer_like_token(&text, after_label) {
            Some(next) => start = next,
            None => return Answer::Invalid,
        }
    }
    match answer_at(&text, start, &choices) {
        // The expected word appears and no other choice does (SPEC §2, test 10).
        Answer::Valid(index) if names_another_choice(&text, index, &choices) => Answer::Invalid,
        answer => answer,
    }
}

/// True when the output names, as a whole word anywhere, a choice other than `index`.
fn names_another_choice(text: &str, index: usize, choices: &[String]) -> bool {
    choices.iter().enumerate().any(|(other, choice)| {
        other != index && choice != &choices[index] && contains_word(text, choice)
    })
}

/// The choice that begins the token at `start`.
fn answer_at(text: &str, start: usize, choices: &[String]) -> Answer {
    let token_end = text[start..]
        .find(char::is_whitespace)
        .map_or(text.len(), |offset| start + offset);
    // The choice may start at the token itself (`<=50K`) or after its decoration (`**No`).
    let decoration = text[start..token_end]
        .find(char::is_alphanumeric)
        .unwrap_or(0);
    let mut best: Option<(usize, usize)> = None; // (choice index, end of the match)
    for at in [start, start + decoration] {
        for (index, choice) in choices.iter().enumerate() {
            if choice.is_empty() || !text[at..].starts_with(choice.as_str()) {
                continue;
            }
            let end = at + choice.len();
            let longer = best.is_none_or(|(_, best_end)| end > best_end);
            if ends_word(text, end) && longer {
                best = Some((index, end));
            }
        }
    }
    match best {
        Some((index, _)) => Answer::Valid(index),
        None => Answer::Invalid,
    }
}

/// Byte offset of the first whitespace-separated token at or after `from` that holds a
/// letter or digit (tokens of pure decoration such as `**`, `-`, ```` ``` ```` are skipped).
fn first_answer_like_token(text: &str, from: usize) -> Option<usize> {
    let mut offset = from;
    for token in text[from..].split_inclusive(char::is_whitespace) {
        if token.chars().any(char::is_alphanumeric) {
            let leading_space = token.len() - token.trim_start().len();
            return Some(offset + leading_space);
        }
        offset += token.len();
    }
    None
}

/// When the token at `start` is an `Answer:` label (and `answer` is not itself a choice),
/// the offset just after its colon.
fn skip_label(text: &str, start: usize, choices: &[String]) -> Option<usize> {
    if choices.iter().any(|choice| choice == ANSWER_LABEL) {
        return None;
    }
    let rest = &text[start..];
    let word_start = rest.find(char::is_alphanumeric)?;
    let after_word = rest[word_start..].strip_prefix(ANSWER_LABEL)?;
    // Only markdown may sit between the label and its colon (`**Answer:**`, `Answer :`).
    let colon = after_word.find(':')?;
    let between_is_decoration = after_word[..colon]
        .chars()
        .all(|c| c == '*' || c == '_' || c.is_whitespace());
    between_is_decoration.then(|| start + word_start + ANSWER_LABEL.len() + colon + 1)
}

/// True when a word ends at byte `end`: the text ends, or the next character is neither a
/// letter/digit nor a joiner (`.`, `,`, `-`, `'`, `_`) followed by one (`0.5`, `no-one`).
fn ends_word(text: &str, end: usize) -> bool {
    let mut after = text[end..].chars();
    match after.next() {
        None => true,
        Some(c) if c.is_alphanumeric() => false,
        Some('.' | ',' | '-' | '\'' | '_') => !after.next().is_some_and(char::is_alphanumeric),
        Some(_) => true,
    }
}

/// True when `word` occurs in `text` as a whole word (not inside a longer one).
fn contains_word(text: &str, word: &str) -> bool {
    if word.is_empty() {
        return false;
    }
    text.match_indices(word)
        .any(|(at, _)| starts_word(text, at) && ends_word(text, at + word.len()))
}

/// True when a word starts at byte `at`: the text starts, or the previous character is
/// neither a letter/digit nor a joiner (`.`, `,`, `-`, `'`, `_`) preceded by one (the `2`
/// of `14.2`, the `no` of `yes-no`... are inside a longer word).
fn starts_word(text: &str, at: usize) -> bool {
    let mut before = text[..at].chars().rev();
    match before.next() {
        None => true,
        Some(c) if c.is_alphanumeric() => false,
        Some('.' | ',' | '-' | '\'' | '_') => !before.next().is_some_and(char::is_alphanumeric),
        Some(_) => true,
    }
}

/// Replaces HTML-like tags and special tokens (`<b>`, `</b>`, `</s>`, `<|eot_id|>`,
/// `<end_of_turn>`) by spaces; `<=50K` and `<1H OCEAN` are left alone.
fn remove_tags(text: &str) -> String {
    let mut cleaned = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        cleaned.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let tag_len = after
            .find('>')
            .filter(|&close| is_tag_body(&after[..close]));
        match tag_len {
            Some(close) => {
                cleaned.push(' ');
                rest = &after[close + 1..];
            }
            None => {
                cleaned.push('<');
                rest = after;
            }
        }
    }
    cleaned.push_str(rest);
    cleaned
}

/// `b`, `/b`, `/s`, `|eot_id|`, `end_of_turn`: letters first, then letters, digits, `_`, `|`.
fn is_tag_body(body: &str) -> bool {
    let name = body.trim_start_matches(['/', '|']);
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '|' | '/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choices(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    fn yes_no(output: &str) -> Answer {
        parse_answer(output, &choices(&["Yes", "No"]))
    }

    #[test]
    fn plain_answers_in_any_case() {
        assert_eq!(yes_no("Yes"), Answer::Valid(0));
        assert_eq!(yes_no("no"), Answer::Valid(1));
        assert_eq!(yes_no("YES"), Answer::Valid(0));
        assert_eq!(yes_no(" \n No"), Answer::Valid(1));
    }

    #[test]
    fn trailing_punctuation_and_text_are_fine() {
        assert_eq!(yes_no("Yes."), Answer::Valid(0));
        assert_eq!(yes_no("No, because"), Answer::Valid(1));
        assert_eq!(yes_no("Yes!"), Answer::Valid(0));
        assert_eq!(yes_no("No\n\nExplanation"), Answer::Valid(1));
        // A word that only contains a choice is not that choice.
        assert_eq!(yes_no("Yes, nothing changed"), Answer::Valid(0));
        assert_eq!(yes_no("No, not altered"), Answer::Valid(1));
    }

    #[test]
    fn decoration_is_skipped() {
        assert_eq!(yes_no("**No**"), Answer::Valid(1));
        assert_eq!(yes_no("\"yes\""), Answer::Valid(0));
        assert_eq!(yes_no("'No'"), Answer::Valid(1));
        assert_eq!(yes_no("`Yes`"), Answer::Valid(0));
        assert_eq!(yes_no("- Yes"), Answer::Valid(0));
        assert_eq!(yes_no("** Yes"), Answer::Valid(0));
        assert_eq!(yes_no("(No)"), Answer::Valid(1));
        assert_eq!(yes_no("```\nYes"), Answer::Valid(0));
    }

    #[test]
    fn tags_and_special_tokens_are_skipped() {
        assert_eq!(yes_no("<b>Yes</b>"), Answer::Valid(0));
        assert_eq!(yes_no("No</s>"), Answer::Valid(1));
        assert_eq!(yes_no("<|eot_id|>Yes"), Answer::Valid(0));
        assert_eq!(yes_no("<end_of_turn>"), Answer::Invalid);
    }

    #[test]
    fn answer_label_is_skipped_once() {
        assert_eq!(yes_no("Answer: Yes"), Answer::Valid(0));
        assert_eq!(yes_no("**Answer:** No"), Answer::Valid(1));
        assert_eq!(yes_no("answer:no"), Answer::Valid(1));
        assert_eq!(yes_no("Answer: Answer: Yes"), Answer::Invalid);
        assert_eq!(yes_no("Answer:"), Answer::Invalid);
        // Without a colon it is just a word.
        assert_eq!(yes_no("Answer yes"), Answer::Invalid);
    }

    #[test]
    fn label_is_an_answer_when_it_is_a_choice() {
        let odd = choices(&["answer", "question"]);
        assert_eq!(parse_answer("Answer: maybe", &odd), Answer::Valid(0));
        // Naming the other choice too makes it no answer.
        assert_eq!(parse_answer("Answer: question", &odd), Answer::Invalid);
    }

    #[test]
    fn hedged_answers_are_invalid() {
        assert_eq!(yes_no("I think yes"), Answer::Invalid);
        assert_eq!(yes_no("The answer is no"), Answer::Invalid);
        assert_eq!(yes_no("Maybe"), Answer::Invalid);
        assert_eq!(yes_no(""), Answer::Invalid);
        assert_eq!(yes_no("  **  "), Answer::Invalid);
    }

    #[test]
    fn words_that_only_start_with_a_choice_are_invalid() {
        assert_eq!(yes_no("Yesterday"), Answer::Invalid);
        assert_eq!(yes_no("Not sure"), Answer::Invalid);
        assert_eq!(yes_no("No-one knows"), Answer::Invalid);
        assert_eq!(yes_no("Nope"), Answer::Invalid);
    }

    #[test]
    fn two_choices_in_the_first_token_are_invalid() {
        assert_eq!(yes_no("Yes/No"), Answer::Invalid);
        assert_eq!(yes_no("no|yes"), Answer::Invalid);
        assert_eq!(yes_no("yes/yes"), Answer::Valid(0));
        let species = choices(&["setosa", "versicolor", "virginica"]);
        assert_eq!(parse_answer("setosa/virginica", &species), Answer::Invalid);
    }

    #[test]
    fn the_other_choice_anywhere_makes_the_answer_invalid() {
        // SPEC §2: correct only when the expected word appears and the other does not.
        assert_eq!(yes_no("Yes or no"), Answer::Invalid);
        assert_eq!(yes_no("Yes or No?"), Answer::Invalid);
        assert_eq!(yes_no("No. Yes"), Answer::Invalid);
        assert_eq!(yes_no("Yes\nUnchanged: No"), Answer::Invalid);
        assert_eq!(yes_no("**No** (yes"), Answer::Invalid);
        let classes = choices(&["0", "1", "2"]);
        assert_eq!(parse_answer("1 or 2", &classes), Answer::Invalid);
        // Digits inside a number are not a class.
        assert_eq!(parse_answer("1, alcohol 14.2", &classes), Answer::Valid(1));
        assert_eq!(parse_answer("0\n0.5", &classes), Answer::Valid(0));
    }

    #[test]
    fn class_names() {
        let species = choices(&["setosa", "versicolor", "virginica"]);
        assert_eq!(parse_answer(" Virginica", &species), Answer::Valid(2));
        assert_eq!(parse_answer("versicolor.", &species), Answer::Valid(1));
        assert_eq!(parse_answer("Iris-setosa", &species), Answer::Invalid);
    }

    #[test]
    fn numeric_classes() {
        let classes = choices(&["0", "1", "2"]);
        assert_eq!(parse_answer("1", &classes), Answer::Valid(1));
        assert_eq!(parse_answer(" 2.", &classes), Answer::Valid(2));
        assert_eq!(parse_answer("10", &classes), Answer::Invalid);
        assert_eq!(parse_answer("0.5", &classes), Answer::Invalid);
        assert_eq!(parse_answer("class 1", &classes), Answer::Invalid);
    }

    #[test]
    fn choices_with_spaces_and_symbols() {
        let income = choices(&["<=50K", ">50K"]);
        assert_eq!(parse_answer("<=50K", &income), Answer::Valid(0));
        assert_eq!(parse_answer(" >50K.", &income), Answer::Valid(1));
        let spaced = choices(&["class 1", "class 10"]);
        assert_eq!(parse_answer("Class 10", &spaced), Answer::Valid(1));
        assert_eq!(parse_answer("class 1, surely", &spaced), Answer::Valid(0));
    }

    #[test]
    fn no_choices_is_invalid() {
        assert_eq!(parse_answer("yes", &[]), Answer::Invalid);
        assert_eq!(parse_answer("yes", &choices(&[" "])), Answer::Invalid);
    }
}
