//! A unified diff for the terminal: the lines of each hunk numbered as in
//! the file (a removed line by its old number, an added or kept one by its
//! new number), the headers as they are.

/// One line of a diff, with the number it has in the file when it is inside
/// a hunk.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct DiffLine<'a> {
    pub(super) number: Option<u64>,
    pub(super) text: &'a str,
}

/// The lines of `diff`, numbered. A line outside any hunk (the `---`/`+++`
/// headers, a diff cut before its first `@@`) and a hunk's `\ No newline`
/// note get no number.
pub(super) fn numbered(diff: &str) -> Vec<DiffLine<'_>> {
    // The next old and new line numbers, once a hunk header was read.
    let mut next: Option<(u64, u64)> = None;
    diff.lines()
        .map(|text| {
            if text.starts_with("@@") {
                next = hunk_start(text);
                return DiffLine { number: None, text };
            }
            let Some((old, new)) = next.as_mut() else {
                return DiffLine { number: None, text };
            };
            let number = match text.chars().next() {
                Some('-') => Some(step(old)),
                Some('+') => Some(step(new)),
                Some(' ') | None => {
                    step(old);
                    Some(step(new))
                }
                _ => None,
            };
            DiffLine { number, text }
        })
        .collect()
}

/// Returns the number and moves to the next one.
fn step(n: &mut u64) -> u64 {
    let this = *n;
    *n = n.saturating_add(1);
    this
}

/// The first old and new line numbers of a hunk header, `@@ -a[,b] +c[,d]
/// @@…`; `None` when it is not one (its lines then go unnumbered).
fn hunk_start(header: &str) -> Option<(u64, u64)> {
    let mut words = header.strip_prefix("@@")?.split_whitespace();
    let old = words.next()?.strip_prefix('-')?;
    let new = words.next()?.strip_prefix('+')?;
    let first = |range: &str| range.split(',').next()?.parse::<u64>().ok();
    // A range of zero lines starts at the line before (`-0,0` in a new file).
    Some((first(old)?.max(1), first(new)?.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(diff: &str) -> Vec<Option<u64>> {
        numbered(diff).into_iter().map(|l| l.number).collect()
    }

    #[test]
    fn each_line_of_a_hunk_has_its_number_in_the_file() {
        let diff = "--- a/f\n+++ b/f\n@@ -3,4 +3,5 @@ fn main\n keep\n-old\n+new\n+added\n keep\n";
        assert_eq!(
            numbers(diff),
            [
                None,
                None,
                None,
                Some(3),
                Some(4),
                Some(4),
                Some(5),
                Some(6)
            ]
        );
    }

    #[test]
    fn a_second_hunk_starts_again_from_its_header() {
        let diff = "@@ -1 +1 @@\n-a\n+b\n@@ -40,2 +40,2 @@\n x\n-y\n+z\n";
        assert_eq!(
            numbers(diff),
            [None, Some(1), Some(1), None, Some(40), Some(41), Some(41)]
        );
    }

    #[test]
    fn a_new_file_counts_from_one_and_odd_lines_have_no_number() {
        let diff = "@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n";
        assert_eq!(numbers(diff), [None, Some(1), Some(2), None]);
    }

    #[test]
    fn without_a_hunk_header_nothing_is_numbered() {
        assert_eq!(numbers("-a\n+b"), [None, None]);
        assert_eq!(numbers("@@ broken @@\n-a\n+b"), [None, None, None]);
    }

    #[test]
    fn numbers_do_not_overflow() {
        let diff = format!("@@ -{max} +{max} @@\n x\n x\n", max = u64::MAX);
        assert_eq!(numbers(&diff), [None, Some(u64::MAX), Some(u64::MAX)]);
    }
}
