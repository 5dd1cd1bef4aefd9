//! Unit tests of the reading of command lines.

use super::*;

fn parts(command: &str) -> Vec<String> {
    match split_compound(command) {
        Ok(parts) => parts,
        Err(e) => vec![format!("ERROR: {e}")],
    }
}

#[test]
fn separators_split_commands() {
    assert_eq!(parts("git status"), ["git status"]);
    assert_eq!(parts("  git   status  "), ["git status"]);
    assert_eq!(
        parts("a && b || c; d | e |& f & g"),
        ["a", "b", "c", "d", "e", "f", "g"]
    );
    assert_eq!(parts("a\nb"), ["a", "b"]);
    assert_eq!(parts("git status;"), ["git status"]);
    assert_eq!(parts("(a; b) && c"), ["a", "b", "c"]);
    assert_eq!(parts(""), Vec::<String>::new());
}

#[test]
fn quotes_keep_operators_as_data() {
    assert_eq!(parts("echo \"a && b\""), ["echo \"a && b\""]);
    assert_eq!(parts("echo 'a; b | c'"), ["echo 'a; b | c'"]);
    assert_eq!(parts("echo a\\;b"), ["echo a\\;b"]);
    assert_eq!(parts("echo \\\"a && b\\\""), ["echo \\\"a", "b\\\""]);
    assert_eq!(parts("echo \"it's\" && x"), ["echo \"it's\"", "x"]);
}

#[test]
fn substitutions_are_commands() {
    assert_eq!(parts("echo $(rm -rf x)"), ["rm -rf x", "echo $(rm -rf x)"]);
    assert_eq!(
        parts("echo \"$(rm -rf x)\""),
        ["rm -rf x", "echo \"$(rm -rf x)\""]
    );
    assert_eq!(parts("echo `rm -rf x`"), ["rm -rf x", "echo `rm -rf x`"]);
    assert_eq!(
        parts("echo \"`rm -rf x`\""),
        ["rm -rf x", "echo \"`rm -rf x`\""]
    );
    assert_eq!(parts("echo '$(not run)'"), ["echo '$(not run)'"]);
    assert_eq!(
        parts("diff <(ls a) >(wc)"),
        ["ls a", "wc", "diff <(ls a) >(wc)"]
    );
    assert_eq!(parts("echo ${x:-$(id)}"), ["id", "echo ${x:-$(id)}"]);
    assert_eq!(parts("echo $(a $(b))"), ["b", "a $(b)", "echo $(a $(b))"]);
}

#[test]
fn ansi_c_quotes_escape_their_quote() {
    // bash: `$'\''` is the word `'`; the rm runs.
    assert_eq!(parts("echo $'\\''\nrm -rf x"), ["echo $'\\''", "rm -rf x"]);
    assert_eq!(parts("echo $'a;b'"), ["echo $'a;b'"]);
}

#[test]
fn comments_end_at_the_line() {
    assert_eq!(parts("git status #&& rm"), ["git status"]);
    assert_eq!(parts("git status#&& rm"), ["git status#", "rm"]);
    assert_eq!(parts("git status # x\nrm y"), ["git status", "rm y"]);
}

#[test]
fn redirections() {
    assert_eq!(parts("cargo test 2>&1"), ["cargo test"]);
    assert_eq!(parts("cargo test >/dev/null 2>&1"), ["cargo test"]);
    assert_eq!(parts("echo hi > out.txt"), ["echo hi", "> out.txt"]);
    assert_eq!(parts("echo hi>>out.txt"), ["echo hi", ">> out.txt"]);
    assert_eq!(parts("make 2> err.log"), ["make", "2> err.log"]);
    assert_eq!(parts("make &> all.log"), ["make", "&> all.log"]);
    assert_eq!(parts("make >& all.log"), ["make", ">& all.log"]);
    assert_eq!(parts("cat < in.txt"), ["cat"]);
    assert_eq!(parts("exec 3<> f"), ["exec", "3<> f"]);
    assert_eq!(parts("echo 2>x"), ["echo", "2> x"]);
    assert_eq!(parts("echo a2>x"), ["echo a2", "> x"]);
    assert!(parts("echo >").join("").starts_with("ERROR"));
}

#[test]
fn heredocs() {
    assert_eq!(
        parts("cat <<EOF\nrm -rf x\nEOF\necho done"),
        ["cat", "echo done"]
    );
    assert_eq!(parts("cat <<EOF\n$(rm -rf x)\nEOF"), ["cat", "rm -rf x"]);
    assert_eq!(parts("cat <<'EOF'\n$(rm -rf x)\nEOF"), ["cat"]);
    assert_eq!(parts("cat <<-EOF\n\tit's\n\tEOF\nls"), ["cat", "ls"]);
    assert!(parts("cat <<EOF\nno end").join("").starts_with("ERROR"));
    // bash would join `x\` with `EOF` and read on to the second EOF.
    assert!(
        parts("cat <<EOF\nx\\\nEOF\nit's\nEOF\nrm -rf y\necho '")
            .join("")
            .starts_with("ERROR")
    );
    assert_eq!(parts("cat <<'EOF'\nx\\\nEOF\nls"), ["cat", "ls"]);
    assert_eq!(parts("cat <<EOF\nx\\\\\nEOF\nls"), ["cat", "ls"]);
}

#[test]
fn unreadable_lines_are_errors() {
    for bad in [
        "echo 'a",
        "echo \"a",
        "echo $(a",
        "echo `a",
        "echo a)",
        "echo ${x:-'a'}",
        "echo $'a",
        "echo \"`echo \\\"x\\\"`\"",
    ] {
        assert!(
            split_compound(bad).is_err(),
            "{bad:?} should not be readable"
        );
    }
}

#[test]
fn line_continuations_join_words() {
    assert_eq!(parts("cargo \\\n  test"), ["cargo test"]);
    assert_eq!(parts("car\\\ngo test"), ["cargo test"]);
}

#[test]
fn literal_text_removes_quotes() {
    assert_eq!(literal_text("'a b'"), Some("a b".to_string()));
    assert_eq!(literal_text("\"a\\\"b\""), Some("a\"b".to_string()));
    assert_eq!(literal_text("r''m"), Some("rm".to_string()));
    assert_eq!(literal_text("\\rm"), Some("rm".to_string()));
    assert_eq!(literal_text("$x"), None);
    assert_eq!(literal_text("\"$x\""), None);
    assert_eq!(literal_text("'$x'"), Some("$x".to_string()));
    assert_eq!(literal_text("*.rs"), None);
    assert_eq!(literal_text("~/x"), None);
}

#[test]
fn normalized_form_and_simplicity() {
    let s = parse("git   status").unwrap();
    assert!(s.is_simple());
    assert_eq!(s.normalized, "git status");
    let s = parse("git status\n  ls   -l # hi\n").unwrap();
    assert_eq!(s.normalized, "git status ; ls -l");
    // Blank lines, a leading newline and a trailing `;` add nothing.
    assert_eq!(
        parse("\n# c\ngit status\n\n\nls;").unwrap().normalized,
        "git status ; ls"
    );
    assert!(parse("git status;").unwrap().is_simple());
    assert!(!parse("a && b").unwrap().is_simple());
    assert!(!parse("a 2>&1").unwrap().is_simple());
    assert!(!parse("echo $(a)").unwrap().is_simple());
    assert!(parse("cd src && ls").unwrap().changes_dir);
}

fn is_error(command: &str) -> bool {
    split_compound(command).is_err()
}

#[test]
fn double_semicolons_belong_to_case() {
    assert!(is_error("a;;b"));
    assert!(is_error("a ;& b"));
}

#[test]
fn loops_list_their_bodies_not_their_keywords() {
    assert_eq!(
        parts("for f in *.txt; do wc -l \"$f\"; done"),
        ["wc -l \"$f\""]
    );
    assert_eq!(parts("for f in a b\ndo\n  echo $f\ndone"), ["echo $f"]);
    assert_eq!(parts("for f; do echo $f; done"), ["echo $f"]);
    assert_eq!(
        parts("for f in $(ls); do cat \"$f\"; done"),
        ["ls", "cat \"$f\""]
    );
    assert_eq!(parts("while true; do sleep 1; done"), ["true", "sleep 1"]);
    assert_eq!(parts("until make; do sleep 5; done"), ["make", "sleep 5"]);
    assert_eq!(
        parts("while read -r l; do echo \"$l\"; done < in.txt"),
        ["read -r l", "echo \"$l\""]
    );
    assert_eq!(
        parts("for d in */; do (cd \"$d\" && git pull); done"),
        ["cd \"$d\"", "git pull"]
    );
    assert_eq!(
        parts("select x in a b; do echo $x; break; done"),
        ["echo $x", "break"]
    );
    // `do`, `done` and `in` are words where they are not reserved.
    assert_eq!(
        parts("echo do done in for; for x in do done; do echo $x; done"),
        ["echo do done in for", "echo $x"]
    );
}

#[test]
fn conditionals_and_groups() {
    assert_eq!(
        parts("if [ -f a ]; then cat a; elif test -d b; then ls b; else echo none; fi"),
        ["[ -f a ]", "cat a", "test -d b", "ls b", "echo none"]
    );
    assert_eq!(
        parts("if ! grep -q x f; then echo no; fi"),
        ["grep -q x f", "echo no"]
    );
    assert_eq!(
        parts("{ echo a; echo b; } > out.txt"),
        ["echo a", "echo b", "> out.txt"]
    );
    assert_eq!(
        parts("{ echo }"),
        ["ERROR: unterminated compound command: `}` expected"]
    );
    assert_eq!(parts("echo { }"), ["echo { }"]);
    assert_eq!(parts("time -p make"), ["make"]);
    // `[[ … ]]` is not a command unless it does arithmetic.
    assert_eq!(parts("[[ -f a && ! -d b ]] && echo y"), ["echo y"]);
    assert_eq!(parts("[[ $(id -u) == 0 ]] || exit"), ["id -u", "exit"]);
    assert_eq!(parts("[[ $n -gt 3 ]]"), ["[[ $n -gt 3 ]]"]);
    assert_eq!(parts("[[ $x =~ ^(a|b)+$ ]] && echo m"), ["echo m"]);
    assert_eq!(parts("[[ a < b ]]"), Vec::<String>::new());
}

#[test]
fn case_reads_patterns_as_data() {
    assert_eq!(
        parts(
            "case \"$1\" in\n  start|go) run.sh ;;\n  (stop) kill $pid ;;\n  *) echo usage ;;\nesac"
        ),
        ["run.sh", "kill $pid", "echo usage"]
    );
    assert_eq!(parts("case x in a) echo a;; esac; ls"), ["echo a", "ls"]);
    assert_eq!(parts("case x in a) echo a;; b) ;; esac"), ["echo a"]);
    assert_eq!(parts("case x in esac"), Vec::<String>::new());
    assert_eq!(
        parts("echo $(case x in a) echo in;; esac)"),
        ["echo in", "echo $(case x in a) echo in;; esac)"]
    );
    assert!(is_error("case x in a) echo"));
    assert!(is_error("case x a) echo;; esac"));
}

#[test]
fn functions_count_their_bodies() {
    assert_eq!(
        parts("f() { rm -rf \"$1\"; }; f build"),
        ["rm -rf \"$1\"", "f build"]
    );
    assert_eq!(parts("function g { ls; }"), ["ls"]);
    assert_eq!(parts("function g() ( ls )"), ["ls"]);
    assert_eq!(parts("h ()\n{\n  echo hi\n}"), ["echo hi"]);
    assert!(is_error("f() echo hi"));
    assert!(is_error("echo (a)"));
}

#[test]
fn arithmetic_is_its_own_part() {
    assert_eq!(parts("echo $((1 + 2))"), ["echo $((1 + 2))", "$((1 + 2))"]);
    assert_eq!(parts("((i++))"), ["((i++))"]);
    assert_eq!(
        parts("for ((i = 0; i < 3; i++)); do echo $i; done"),
        ["echo $i", "((i = 0; i < 3; i++))"]
    );
    assert_eq!(
        parts("echo $(( $(wc -l < f) * 2 ))"),
        [
            "wc -l",
            "echo $(( $(wc -l < f) * 2 ))",
            "$(( $(wc -l < f) * 2 ))"
        ]
    );
    // Not arithmetic: a command substitution of two subshells.
    assert_eq!(parts("echo $((a); (b))"), ["a", "b", "echo $((a); (b))"]);
    assert_eq!(parts("((a); (b))"), ["a", "b"]);
}

#[test]
fn unterminated_compounds_are_errors() {
    for bad in [
        "for f in *; do echo",
        "for f in *; echo; done",
        "for 1 in a; do :; done",
        "while true; do",
        "if true; then echo",
        "if true; echo; fi",
        "{ echo",
        "done",
        "fi",
        "echo; }",
        "[[ -f x",
        "for ((i=0; i<3; i++); do :; done",
        "(for x in a; do echo; ) done",
    ] {
        assert!(is_error(bad), "{bad:?} should not be readable");
    }
}

#[test]
fn reserved_words_right_after_compound_commands() {
    assert_eq!(parts("if(true)then(echo t)fi"), ["true", "echo t"]);
    assert_eq!(parts("while [[ -z $x ]] do echo; done"), ["echo"]);
    assert_eq!(parts("{ (echo a) }"), ["echo a"]);
    assert_eq!(parts("{(echo hi); }"), ["echo hi"]);
    assert_eq!(parts("!(echo hi)"), ["echo hi"]);
    assert!(is_error("(echo a) if true; then :; fi"));
}

#[test]
fn reserved_words_only_start_commands() {
    // After an assignment or a redirection bash runs a command named `if`.
    assert_eq!(parts("A=1 if x"), ["A=1 if x"]);
    assert_eq!(parts(">/dev/null done"), ["done"]);
    assert_eq!(parts("\"for\" x"), ["\"for\" x"]);
}

#[test]
fn arrays_keep_their_elements() {
    assert_eq!(
        parts("files=(*.txt $(ls)) && echo ${#files[@]}"),
        ["ls", "files=(*.txt $(ls))", "echo ${#files[@]}"]
    );
    assert!(is_error("a=(b=(c))"));
}

#[test]
fn loops_over_environment_variables_need_permission() {
    assert_eq!(
        parts("for PATH in /tmp/x; do cargo build; done"),
        ["for PATH in /tmp/x", "cargo build"]
    );
    assert_eq!(
        parts("for http_proxy in h; do curl x; done"),
        ["for http_proxy in h", "curl x"]
    );
}

#[test]
fn heredocs_inside_compounds() {
    assert_eq!(
        parts("while read l; do echo \"$l\"; done <<EOF\na\nb\nEOF\necho end"),
        ["read l", "echo \"$l\"", "echo end"]
    );
    assert_eq!(
        parts("if true; then cat <<EOF\n$(id)\nEOF\nfi"),
        ["true", "cat", "id"]
    );
}

#[test]
fn normalized_text_keeps_every_token() {
    let s = parse("for f in *.txt; do wc -l \"$f\"; done").unwrap();
    assert_eq!(s.normalized, "for f in *.txt ; do wc -l \"$f\" ; done");
    assert!(!s.is_simple());
    let other = parse("for f in /etc/*; do wc -l \"$f\"; done").unwrap();
    assert_ne!(s.normalized, other.normalized);
    let s = parse("case $x in a|b) echo;; esac").unwrap();
    assert_eq!(s.normalized, "case $x in a | b ) echo ;; esac");
    assert!(!parse("echo $((1+2))").unwrap().is_simple());
}

fn wrapped(command: &str) -> Vec<String> {
    parse(command)
        .map(|s| s.wrapped.iter().map(|w| join_words(w)).collect())
        .unwrap_or_else(|e| vec![format!("ERROR: {e}")])
}

#[test]
fn wrapped_commands() {
    assert_eq!(wrapped("xargs rm -f"), ["rm -f"]);
    assert_eq!(wrapped("xargs -I{} -n 1 rm {}"), ["rm {}"]);
    assert_eq!(wrapped("xargs -0"), Vec::<String>::new());
    assert_eq!(
        wrapped("find . -name '*.o' -exec rm {} \\; -o -execdir chmod +x {} +"),
        ["rm {}", "chmod +x {}"]
    );
    assert_eq!(wrapped("sudo -u root rm -rf /"), ["rm -rf /"]);
    assert_eq!(wrapped("env -i A=1 B=2 rm x"), ["rm x"]);
    assert_eq!(wrapped("A=1 B=2 rm x"), ["rm x"]);
    assert_eq!(wrapped("nohup nice -n 5 rm x"), ["nice -n 5 rm x", "rm x"]);
    assert_eq!(wrapped("timeout -s KILL 10 rm x"), ["rm x"]);
    assert_eq!(wrapped("command -v rm"), Vec::<String>::new());
    assert_eq!(wrapped("coproc rm x"), ["rm x"]);
    assert_eq!(
        wrapped("bash -c 'rm -rf x; echo > /etc/y'"),
        ["rm -rf x", "echo"]
    );
    assert_eq!(wrapped("sh -ec \"git push\""), ["git push"]);
    assert_eq!(wrapped("eval 'rm' x"), ["rm x"]);
    assert_eq!(wrapped("bash script.sh"), Vec::<String>::new());
    // A command line in a variable: unknown text.
    let s = parse("sh -c \"$CMD\"").unwrap();
    assert_eq!(s.wrapped.len(), 1);
    assert_eq!(s.wrapped[0][0].literal, None);
    let s = parse("bash -c 'echo > /etc/y'").unwrap();
    assert_eq!(s.wrapped_writes.len(), 1);
    assert_eq!(s.wrapped_writes[0].target.raw, "/etc/y");
    // Deep nesting stops with an unknown command, not a stack overflow.
    let deep = "sudo ".repeat(100) + "rm x";
    assert!(parse(&deep).is_ok());
    let deep = "( ".repeat(100) + "x" + &" )".repeat(100);
    assert!(is_error(&deep));
    let deep = "echo $(".repeat(100) + "x" + &")".repeat(100);
    assert!(is_error(&deep));
    let deep = "$((".repeat(100) + "1" + &"))".repeat(100);
    assert!(is_error(&deep));
    let deep = "{ ".repeat(100) + "x" + &"; }".repeat(100);
    assert!(is_error(&deep));
}

#[test]
fn nested_arithmetic_that_fails_is_read_in_linear_time() {
    // Each `$((` fails as arithmetic and is read again as `$(` `(`; without
    // a bound that doubles the work per level.
    let line = "echo ".to_string() + &"$(( (a) ".repeat(30) + &")".repeat(60);
    let started = std::time::Instant::now();
    let _ = split_compound(&line);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
