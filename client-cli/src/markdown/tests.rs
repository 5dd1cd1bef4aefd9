use proptest::prelude::*;

use super::*;

/// Plain rendering at `width` columns.
fn plain(markdown: &str, width: usize) -> String {
    render(markdown, Style::plain(width))
}

#[track_caller]
fn check(markdown: &str, expected: &str) {
    let got = plain(markdown, 40);
    assert_eq!(
        got, expected,
        "\n--- got ---\n{got}--- expected ---\n{expected}"
    );
}

#[test]
fn plain_blocks() {
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("\n\n", ""),
        ("Hello, world.", "Hello, world.\n"),
        // Soft breaks join the lines of a paragraph; wrapped at 40 columns.
        (
            "The quick brown fox\njumps over the lazy dog and runs far away into the woods.",
            "The quick brown fox jumps over the lazy\ndog and runs far away into the woods.\n",
        ),
        ("Two\n\nparagraphs", "Two\n\nparagraphs\n"),
        ("Hard  \nbreak", "Hard\nbreak\n"),
        ("# Title\n\n## Sub *part*", "# Title\n\n## Sub *part*\n"),
        ("Title\n=====", "# Title\n"),
        (
            "*em* **strong** ~~gone~~ `code`",
            "*em* **strong** ~~gone~~ `code`\n",
        ),
        ("[docs](https://x.dev/a)", "docs (https://x.dev/a)\n"),
        ("<https://x.dev>", "https://x.dev\n"),
        ("![a cat](cat.png)", "[image: a cat] (cat.png)\n"),
        (
            "> quoted\n> text\n\n> second",
            "│ quoted text\n\n│ second\n",
        ),
        ("> a\n>\n> b", "│ a\n│\n│ b\n"),
        ("---", &format!("{}\n", "─".repeat(40))),
        ("- one\n- two\n- three", "• one\n• two\n• three\n"),
        ("3. three\n4. four", "3. three\n4. four\n"),
        ("- a\n  - b\n    - c\n- d", "• a\n  ◦ b\n    ▪ c\n• d\n"),
        ("- a\n\n- b", "• a\n\n• b\n"),
        ("- [x] done\n- [ ] todo", "• [x] done\n• [ ] todo\n"),
        (
            "- a list item long enough that it has to wrap onto a second line",
            "• a list item long enough that it has to\n  wrap onto a second line\n",
        ),
        (
            "1. first\n\n   more of first\n2. second",
            "1. first\n\n   more of first\n\n2. second\n",
        ),
        ("-", "•\n"),
        ("```rust\nfn main() {}\n```", "```rust\nfn main() {}\n```\n"),
        ("    indented\n    code", "```\nindented\ncode\n```\n"),
        (
            "- item\n\n  ```sh\n  ls\n  ```",
            "• item\n\n  ```sh\n  ls\n  ```\n",
        ),
        ("```\nno end", "```\nno end\n```\n"),
        ("<div>\nhi\n</div>", "<div>\nhi\n</div>\n"),
        ("a\u{1b}[31mb", "a\u{fffd}[31mb\n"),
        (
            "Para\n\n# Head\n\n- item\n\nEnd",
            "Para\n\n# Head\n\n• item\n\nEnd\n",
        ),
    ];
    for (markdown, expected) in cases {
        check(markdown, expected);
    }
}

#[test]
fn tables() {
    check(
        "| name | n |\n|:-----|--:|\n| foo | 1 |\n| barbaz | 22 |",
        " name   │  n\n────────┼────\n foo    │  1\n barbaz │ 22\n",
    );
    check(
        "| a | b | c |\n|:-:|---|---|\n| x | | z |",
        " a │ b │ c\n───┼───┼───\n x │   │ z\n",
    );
    // Too wide for 40 columns: one line per cell.
    check(
        "| key | description |\n|---|---|\n| a | a description much longer than the screen is |\n| b | short |",
        "key: a\ndescription: a description much longer than the screen is\n\nkey: b\ndescription: short\n",
    );
}

#[test]
fn coloured_styles() {
    let color = |m: &str| render(m, Style::colored(40));
    assert_eq!(color("# Hi"), "\x1b[1;4;35mHi\x1b[0m\n");
    assert_eq!(color("## Hi"), "\x1b[1;35mHi\x1b[0m\n");
    assert_eq!(
        color("*a* **b** ~~c~~ `d`"),
        "\x1b[3ma\x1b[0m \x1b[1mb\x1b[0m \x1b[9mc\x1b[0m \x1b[36md\x1b[0m\n"
    );
    assert_eq!(
        color("[x](http://u)"),
        "\x1b[4;34mx\x1b[0m\x1b[2m (http://u)\x1b[0m\n"
    );
    assert_eq!(color("> q"), "\x1b[2m│\x1b[0m q\n");
    assert_eq!(color("- i"), "\x1b[33m•\x1b[0m i\n");
}

#[test]
fn plain_output_has_no_escape_sequences() {
    let doc =
        "# H\n\n*a* **b** `c` [d](e)\n\n> q\n\n```rust\nfn f() {}\n```\n\n| a |\n|---|\n| b |\n";
    let out = plain(doc, 80);
    assert!(!out.contains('\x1b'), "{out:?}");
}

#[test]
fn blocks_are_shown_as_soon_as_they_are_complete() {
    let mut s = MarkdownStream::new(Style::plain(80));
    assert_eq!(s.push("Hello "), "");
    assert_eq!(s.push("world\n"), "");
    assert_eq!(s.push("\n"), "Hello world\n");
    assert_eq!(s.push("# Head"), "");
    assert_eq!(s.push("ing\n"), "\n# Heading\n");
    assert_eq!(s.push("```sh\nls\n"), "");
    assert_eq!(s.push("```\n"), "\n```sh\nls\n```\n");
    assert_eq!(s.push("- a\n- b\n\n"), "");
    assert!(s.has_pending());
    // The list is held until the next block starts.
    assert_eq!(s.push("Done.\n"), "\n• a\n• b\n");
    assert_eq!(s.finish(), "\nDone.\n");
    assert!(!s.has_pending());
}

#[test]
fn a_setext_underline_arriving_later_still_makes_a_heading() {
    let mut s = MarkdownStream::new(Style::plain(80));
    assert_eq!(s.push("Title\n"), "");
    assert_eq!(s.push("===\n"), "# Title\n");
    assert_eq!(s.finish(), "");
}

/// Markdown-ish text: the characters that make structure, often.
fn markdownish() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "a",
        "word",
        "longerword",
        " ",
        " ",
        "\n",
        "\n",
        "\n\n",
        "# ",
        "## ",
        "- ",
        "* ",
        "1. ",
        "  ",
        "    ",
        "> ",
        "```",
        "```rust\n",
        "~~~",
        "`",
        "*",
        "**",
        "_",
        "~~",
        "|",
        "|---|",
        ":-:",
        "[",
        "]",
        "(",
        ")",
        "http://x",
        "!",
        "<",
        ">",
        "---",
        "===",
        "\t",
        "é",
        "字",
        "😀",
        "\\",
        "&amp;",
        "[^1]",
        "<div>",
    ]);
    prop::collection::vec(atoms, 0..60).prop_map(|v| v.concat())
}

/// Cut points into `text`, on character boundaries.
fn split(text: &str, cuts: &[usize]) -> Vec<String> {
    let mut bounds: Vec<usize> = cuts
        .iter()
        .map(|c| c % (text.len() + 1))
        .filter(|&c| text.is_char_boundary(c))
        .collect();
    bounds.push(0);
    bounds.push(text.len());
    bounds.sort_unstable();
    bounds.dedup();
    bounds
        .windows(2)
        .map(|w| text[w[0]..w[1]].to_string())
        .collect()
}

proptest! {
    #[test]
    fn streaming_in_any_deltas_prints_what_one_push_prints(
        text in markdownish(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        color in any::<bool>(),
    ) {
        let style = Style { color, truecolor: false, width: 40 };
        let whole = render(&text, style);
        let mut stream = MarkdownStream::new(style);
        let mut pieces = String::new();
        for delta in split(&text, &cuts) {
            pieces.push_str(&stream.push(&delta));
        }
        pieces.push_str(&stream.finish());
        prop_assert_eq!(pieces, whole);
    }

    #[test]
    fn any_input_renders_without_panicking(text in "\\PC*", width in 0usize..200) {
        let _ = render(&text, Style::plain(width));
        let _ = render(&text, Style { color: true, truecolor: true, width });
    }

    #[test]
    fn prose_and_lists_fit_the_width(
        paragraphs in prop::collection::vec(
            (0usize..3, prop::collection::vec("[a-z]{1,12}", 1..40)),
            1..6,
        ),
        width in 30usize..120,
    ) {
        let doc: String = paragraphs
            .iter()
            .map(|(kind, words)| {
                let prefix = ["", "- ", "> "][*kind];
                format!("{prefix}{}\n\n", words.join(" "))
            })
            .collect();
        for line in plain(&doc, width).lines() {
            prop_assert!(display_width(line) <= width, "{line:?} wider than {width}");
        }
    }
}

#[test]
fn a_line_is_judged_only_once_it_is_whole() {
    // Three backticks open a fence, unless a backtick follows on the line.
    let mut s = MarkdownStream::new(Style::plain(80));
    assert_eq!(s.push("text\n```"), "");
    assert_eq!(s.push("a`b\n\n"), "text ```a`b\n");
    assert_eq!(s.finish(), "");
}
