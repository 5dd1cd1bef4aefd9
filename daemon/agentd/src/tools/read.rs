//! `read`: a text file with line numbers.
//!
//! The file is streamed line by line rather than loaded, so reading the
//! first lines of a multi-gigabyte log costs what those lines cost. Line
//! numbers are 1-based like `cat -n`, because that is what the model quotes
//! back in `offset` and what people see in their editors.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};

use agentd_core::ToolSpec;
use agentd_core::tools::Tool;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ToolContext, ToolError, ToolOutput, input, paths};

/// How much of the start of a file is checked for NUL bytes, like git does.
const BINARY_SNIFF_BYTES: usize = 8192;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "description": "First line to read, 1-based"},
            "limit": {"type": "integer", "description": "Number of lines"}
        },
        "required": ["path"]
    })
}

pub(crate) fn spec() -> ToolSpec {
    ToolSpec {
        name: Tool::Read.name().to_string(),
        description: "Read a text file; lines are numbered from 1 (`cat -n` style; the numbers \
                      are not part of the file). Returns 2000 lines unless offset/limit say \
                      otherwise; long lines are clipped. A PNG, JPEG, GIF or WebP file is \
                      returned as an image when the model takes images. Directories and other \
                      binary files are refused."
            .to_string(),
        input_schema: schema(),
    }
}

pub(crate) fn run(input: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let input: Input = input::parse(Tool::Read.name(), &schema(), input)?;
    let path = paths::resolve(ctx, &input.path)?;
    let shown = paths::display(ctx, &path);
    let meta = regular_file(&path, &shown)?;
    let offset = input.offset.unwrap_or(1).max(1);
    let limit = match input.limit {
        Some(0) => return Err(ToolError::new("read: `limit` must be at least 1")),
        Some(n) => n,
        None => ctx.limits.read_default_lines as u64,
    };
    let io_err = |e: std::io::Error| ToolError::new(format!("cannot read {shown}: {e}"));

    let mut file = File::open(&path).map_err(io_err)?;
    let mut sniff = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut sniff)
        .map_err(io_err)?;
    if let Some(media) = agentd_core::ImageMediaType::sniff(&sniff) {
        return image(file, sniff, meta.len(), media, &shown, ctx);
    }
    if sniff.contains(&0) {
        return Err(ToolError::new(format!(
            "{shown} is a binary file (it contains NUL bytes); read shows text files only"
        )));
    }
    if sniff.is_empty() {
        return Ok(ToolOutput::ok(
            format!("{shown} is empty."),
            format!("read {shown} (empty)"),
        ));
    }
    let mut reader = BufReader::with_capacity(64 * 1024, Cursor::new(sniff).chain(file));

    let Window {
        mut out,
        last_shown,
        total,
        hit_budget,
    } = numbered_lines(&mut reader, offset, limit, ctx).map_err(io_err)?;
    if last_shown == 0 {
        return Err(ToolError::new(format!(
            "offset {offset} is beyond the end of {shown}, which has {total} lines"
        )));
    }
    let whole = offset == 1 && last_shown == total;
    if last_shown == total && !whole {
        out.push_str(&format!(
            "[lines {offset}-{total} of {total}: end of file]\n"
        ));
    } else if !whole {
        let why = if hit_budget {
            ", output size limit reached"
        } else {
            ""
        };
        out.push_str(&format!(
            "[lines {offset}-{last_shown} of {total}{why}; use offset={} to read on]\n",
            last_shown + 1
        ));
    }
    let summary = if whole {
        format!("read {shown} ({total} lines)")
    } else {
        format!("read {shown} (lines {offset}-{last_shown} of {total})")
    };
    Ok(ToolOutput::ok(out, summary))
}

/// The metadata of `path`, which must be a regular file.
fn regular_file(path: &std::path::Path, shown: &str) -> Result<std::fs::Metadata, ToolError> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ToolError::new(format!("file not found: {shown}")));
        }
        Err(e) => return Err(ToolError::new(format!("cannot read {shown}: {e}"))),
    };
    if meta.is_dir() {
        return Err(ToolError::new(format!(
            "{shown} is a directory, not a file; use glob to list its files"
        )));
    }
    // A FIFO or a device could block the read forever or never end.
    if !meta.is_file() {
        return Err(ToolError::new(format!("{shown} is not a regular file")));
    }
    Ok(meta)
}

/// The lines of a read: the ones shown, numbered, and how many the file has.
struct Window {
    out: String,
    /// The number of the last line shown; 0 when none was.
    last_shown: u64,
    /// Lines in the file (those past the shown range only counted).
    total: u64,
    /// Whether the output budget ended the window before `limit` did.
    hit_budget: bool,
}

/// Reads from line `offset` on, at most `limit` lines and the output budget,
/// then counts the rest, so the model can page on.
fn numbered_lines(
    reader: &mut impl BufRead,
    offset: u64,
    limit: u64,
    ctx: &ToolContext,
) -> std::io::Result<Window> {
    let budget = ctx.limits.content_budget();
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut hit_budget = false;
    let mut stopped_early = false;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        if number < offset {
            continue;
        }
        if number >= offset.saturating_add(limit) {
            stopped_early = true;
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n').trim_end_matches('\r');
        let rendered = format!(
            "{number:>6}\t{}\n",
            clip(text, ctx.limits.max_read_line_chars)
        );
        // The first line is always shown (clipped lines keep it small), so a
        // read never comes back empty-handed.
        if out.len() + rendered.len() > budget && last_shown > 0 {
            hit_budget = true;
            stopped_early = true;
            break;
        }
        out.push_str(&rendered);
        last_shown = number;
    }
    // Lines past the shown range are only counted, so the model can page on.
    let total = if stopped_early {
        number + count_lines(reader)?
    } else {
        number
    };
    Ok(Window {
        out,
        last_shown,
        total,
        hit_budget,
    })
}

/// Clips a line to `max` characters, saying how long it really was.
fn clip(line: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match line.char_indices().nth(max) {
        None => line.into(),
        Some((cut, _)) => {
            let chars = line.chars().count();
            format!("{}… [line clipped: {chars} chars]", &line[..cut]).into()
        }
    }
}

/// Counts the lines left in `reader`. A last line without a newline counts.
fn count_lines(reader: &mut impl BufRead) -> std::io::Result<u64> {
    let mut count = 0u64;
    let mut last = b'\n';
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            break;
        }
        count += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        last = chunk[chunk.len() - 1];
        let n = chunk.len();
        reader.consume(n);
    }
    if last != b'\n' {
        count += 1;
    }
    Ok(count)
}

/// An image file, for a model that takes images: its bytes checked like a
/// user's image and returned with a one-line description. The file is
/// recognised by its first bytes, never by its name.
fn image(
    mut file: File,
    head: Vec<u8>,
    len: u64,
    media: agentd_core::ImageMediaType,
    shown: &str,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let Some(limits) = ctx.images else {
        let model = if ctx.model.is_empty() {
            "this conversation's model".to_string()
        } else {
            format!("the model {}", ctx.model)
        };
        return Err(ToolError::new(format!(
            "{shown} is a {media} image, and {model} does not take images; read shows text files \
             and, to models that take them, images"
        )));
    };
    let refuse =
        |why: String| ToolError::new(format!("{shown} cannot be shown as an image: {why}"));
    if len > limits.max_bytes {
        return Err(refuse(
            agentd_core::ImageRejected::TooLarge {
                size: len,
                max: limits.max_bytes,
            }
            .to_string(),
        ));
    }
    let mut bytes = head;
    // One byte past the limit tells a file that grew since its metadata.
    (&mut file)
        .take(
            limits
                .max_bytes
                .saturating_add(1)
                .saturating_sub(bytes.len() as u64),
        )
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::new(format!("cannot read {shown}: {e}")))?;
    let staged =
        crate::images::stage_one(&limits, bytes.into()).map_err(|r| refuse(r.to_string()))?;
    let described = staged.image.describe();
    Ok(ToolOutput {
        images: vec![staged],
        ..ToolOutput::ok(
            format!("{shown} is an image ({described}); it follows."),
            format!("read {shown} (image: {described})"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::ctx_in;

    fn setup(name: &str, content: &[u8]) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), content).unwrap();
        let ctx = ctx_in(dir.path());
        (dir, ctx)
    }

    #[test]
    fn whole_file_is_numbered() {
        let (_d, ctx) = setup("a.txt", b"alpha\nbeta\r\ngamma");
        let out = run(json!({"path": "a.txt"}), &ctx).unwrap();
        assert_eq!(out.content, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
        assert_eq!(out.summary, "read a.txt (3 lines)");
    }

    #[test]
    fn offset_and_limit_number_from_the_offset() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let (_d, ctx) = setup("a.txt", text.as_bytes());
        let out = run(json!({"path": "a.txt", "offset": 10, "limit": 3}), &ctx).unwrap();
        assert_eq!(
            out.content,
            "    10\tline 10\n    11\tline 11\n    12\tline 12\n[lines 10-12 of 100; use offset=13 to read on]\n"
        );
        let out = run(json!({"path": "a.txt", "offset": 99}), &ctx).unwrap();
        assert_eq!(
            out.content,
            "    99\tline 99\n   100\tline 100\n[lines 99-100 of 100: end of file]\n"
        );
        let err = run(json!({"path": "a.txt", "offset": 101}), &ctx)
            .unwrap_err()
            .0;
        assert!(
            err.contains("beyond the end") && err.contains("100 lines"),
            "{err}"
        );
    }

    #[test]
    fn default_limit_and_output_budget_apply() {
        let text: String = (1..=50).map(|i| format!("{i}\n")).collect();
        let (_d, mut ctx) = setup("a.txt", text.as_bytes());
        ctx.limits.read_default_lines = 20;
        let out = run(json!({"path": "a.txt"}), &ctx).unwrap();
        assert!(
            out.content
                .ends_with("[lines 1-20 of 50; use offset=21 to read on]\n"),
            "{}",
            out.content
        );
        ctx.limits.max_output_bytes = 150;
        let out = run(json!({"path": "a.txt"}), &ctx).unwrap();
        assert!(
            out.content.contains("output size limit reached"),
            "{}",
            out.content
        );
        assert!(out.content.contains("of 50"), "{}", out.content);
    }

    #[test]
    fn long_lines_are_clipped() {
        let (_d, mut ctx) = setup("a.txt", "é".repeat(50).as_bytes());
        ctx.limits.max_read_line_chars = 10;
        let out = run(json!({"path": "a.txt"}), &ctx).unwrap();
        assert!(
            out.content
                .contains(&format!("{}… [line clipped: 50 chars]", "é".repeat(10))),
            "{}",
            out.content
        );
    }

    #[test]
    fn binary_files_and_directories_are_refused() {
        let (dir, ctx) = setup("b.bin", b"\x7fELF\x00\x01\x02");
        let err = run(json!({"path": "b.bin"}), &ctx).unwrap_err().0;
        assert!(err.contains("binary file"), "{err}");
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let err = run(json!({"path": "sub"}), &ctx).unwrap_err().0;
        assert!(err.contains("is a directory"), "{err}");
        let err = run(json!({"path": "missing.txt"}), &ctx).unwrap_err().0;
        assert_eq!(err, "file not found: missing.txt");
    }

    #[test]
    fn empty_file_is_not_an_error() {
        let (_d, ctx) = setup("e.txt", b"");
        assert_eq!(
            run(json!({"path": "e.txt"}), &ctx).unwrap().content,
            "e.txt is empty."
        );
    }

    /// A GIF header of `width`×`height`, padded to `len` bytes.
    fn gif(width: u16, height: u16, len: usize) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        b.extend(width.to_le_bytes());
        b.extend(height.to_le_bytes());
        b.resize(len, 0);
        b
    }

    #[test]
    fn an_image_file_is_an_image_for_a_model_that_takes_images() {
        let bytes = gif(4, 3, 20_000);
        // Known by its bytes: the name says text.
        let (dir, mut ctx) = setup("notes.txt", &bytes);
        ctx.model = "local-model".to_string();
        let err = run(json!({"path": "notes.txt"}), &ctx).unwrap_err().0;
        assert_eq!(
            err,
            "notes.txt is a gif image, and the model local-model does not take images; read \
             shows text files and, to models that take them, images"
        );

        ctx.images = Some(agentd_core::ImageLimits::default());
        let out = run(json!({"path": "notes.txt", "limit": 1}), &ctx).unwrap();
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "notes.txt is an image (gif 4×3, 20 KB); it follows."
        );
        assert_eq!(out.summary, "read notes.txt (image: gif 4×3, 20 KB)");
        assert_eq!(out.images.len(), 1);
        assert_eq!(
            out.images[0].bytes.as_ref(),
            bytes.as_slice(),
            "every byte, past the sniffed head"
        );
        assert_eq!(
            out.images[0].image.sha256,
            crate::images::sha256_hex(&bytes)
        );

        // The limits are the user's images' limits.
        ctx.images = Some(agentd_core::ImageLimits {
            max_bytes: 10_000,
            ..Default::default()
        });
        let err = run(json!({"path": "notes.txt"}), &ctx).unwrap_err().0;
        assert!(
            err.starts_with("notes.txt cannot be shown as an image: the image is 20000 bytes"),
            "{err}"
        );
        std::fs::write(dir.path().join("wide.gif"), gif(9000, 10, 100)).unwrap();
        ctx.images = Some(agentd_core::ImageLimits::default());
        let err = run(json!({"path": "wide.gif"}), &ctx).unwrap_err().0;
        assert!(
            err.starts_with("wide.gif cannot be shown as an image:"),
            "{err}"
        );
    }
}
