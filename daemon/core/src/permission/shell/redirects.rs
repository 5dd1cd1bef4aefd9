//! Control operators, redirections and here-documents (whose bodies are
//! read after the line that opens them, and may run substitutions).

use super::{FileWrite, HARMLESS_TARGETS, Heredoc, Lexer, ends_word, unquote};

impl Lexer {
    /// A control operator: `;`, `;;`, `;&`, `;;&`, `&`, `&&`, `|`, `||`, `|&`.
    pub(super) fn operator(&mut self) -> String {
        for op in [";;&", ";;", ";&", "&&", "||", "|&", ";", "&", "|"] {
            if self.starts_with(op) {
                self.pos += op.chars().count();
                return op.to_string();
            }
        }
        // Not reached: called on one of the characters above.
        self.pos += 1;
        String::new()
    }

    /// A redirection; `fd` is its file-descriptor prefix (may be empty).
    pub(super) fn redirect(&mut self, fd: String) -> Result<(), String> {
        const OPS: [&str; 12] = [
            "&>>", "&>", ">>", ">|", ">&", "<<<", "<<-", "<<", "<&", "<>", ">", "<",
        ];
        let Some(op) = OPS.iter().find(|op| self.starts_with(op)) else {
            return Err("unexpected `&`".to_string());
        };
        self.pos += op.chars().count();
        let op_text = format!("{fd}{op}");
        self.skip_blanks();
        match self.peek() {
            None => return Err(format!("`{op_text}` has no target")),
            Some('<' | '>') if self.peek_at(1) == Some('(') => {}
            Some(c) if ends_word(c) => return Err(format!("`{op_text}` has no target")),
            Some(_) => {}
        }
        let target = self.read_word()?;
        if target.raw.starts_with(['<', '>']) {
            self.token(&format!("{op_text} {}", target.raw));
        } else {
            self.token(&format!("{op_text}{}", target.raw));
        }
        let is_fd_dup = |t: &str| {
            let t = t.strip_suffix('-').unwrap_or(t);
            t.chars().all(|c| c.is_ascii_digit())
        };
        let writes = match *op {
            "<" | "<<<" | "<&" => false,
            ">&" => !is_fd_dup(&target.raw),
            "<<" | "<<-" => {
                let expands = !target.raw.contains(['\'', '"', '\\']);
                let delimiter = unquote(&target.raw);
                self.heredocs.push(Heredoc {
                    delimiter,
                    strip_tabs: *op == "<<-",
                    expands,
                    level: self.depth,
                });
                false
            }
            _ => true,
        };
        let harmless = target
            .literal
            .as_deref()
            .is_some_and(|t| HARMLESS_TARGETS.contains(&t));
        if writes && !harmless {
            self.writes.push(FileWrite {
                op: op_text,
                target,
            });
        }
        Ok(())
    }

    /// Reads the bodies of the here-documents opened on the line just ended.
    pub(super) fn read_heredocs(&mut self) -> Result<(), String> {
        if self.heredocs.iter().any(|h| h.level != self.depth) {
            return Err("a here-document spans a substitution".to_string());
        }
        for heredoc in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            loop {
                if self.pos >= self.chars.len() {
                    return Err(format!(
                        "the here-document ending with `{}` is not terminated",
                        heredoc.delimiter
                    ));
                }
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                let line: String = self.chars[start..self.pos].iter().collect();
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                let compared = if heredoc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                if compared == heredoc.delimiter {
                    break;
                }
                if heredoc.expands && line.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
                {
                    // bash joins this line with the next before looking for
                    // the delimiter; refuse rather than model it.
                    return Err(
                        "a line continuation inside a here-document is not supported".to_string(),
                    );
                }
                body.push_str(&line);
                body.push('\n');
            }
            self.sep_token(&format!("{body}{}", heredoc.delimiter));
            if heredoc.expands {
                let mut sub = Lexer::new(&body, self.depth + self.compound_depth + 1);
                sub.scan_expansions()?;
                self.absorb(sub);
            }
        }
        Ok(())
    }

    /// Finds the substitutions in text where quotes are plain characters (a
    /// here-document body).
    fn scan_expansions(&mut self) -> Result<(), String> {
        self.check_depth()?;
        let mut sink = String::new();
        while let Some(c) = self.peek() {
            match c {
                '\\' => self.pos += 2,
                '$' => self.dollar(&mut sink, true)?,
                '`' => self.backticks(&mut sink, false)?,
                _ => self.pos += 1,
            }
        }
        Ok(())
    }

    /// Takes over what a sub-lexer found (its tokens stay inside a word).
    pub(super) fn absorb(&mut self, sub: Lexer) {
        self.commands.extend(sub.commands);
        self.writes.extend(sub.writes);
        self.arithmetic.extend(sub.arithmetic);
        self.changes_dir |= sub.changes_dir;
    }
}
