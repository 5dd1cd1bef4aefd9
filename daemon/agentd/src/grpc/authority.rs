//! Lets stock gRPC clients talk to the daemon whatever `:authority` they
//! send on the Unix socket.
//!
//! A Unix socket has no host name, and clients disagree on what to send in
//! its place: grpc-go and grpc-js send `localhost`, but gRPC C-core (Python
//! `grpcio`, Ruby, PHP, C++) sends the percent-encoded socket path, and
//! grpc-java and Bazel send the bare path. h2, the HTTP/2 layer under tonic,
//! checks `:authority` as a URI authority before any of our code sees the
//! request and resets the stream on anything else (`RST_STREAM` with
//! PROTOCOL_ERROR; upstream hyperium/h2#487 and hyperium/tonic#243 are still
//! open and h2 has no option to relax it). The daemon does not use the
//! authority at all: the socket's peer credentials say who is calling.
//!
//! So every accepted connection is read through [`LenientAuthority`], which
//! follows the client's HTTP/2 frames and hands h2 each header block decoded
//! and written again as plain literals, with an authority h2 would refuse
//! replaced by `localhost`. Everything else (the preface, DATA, SETTINGS,
//! WINDOW_UPDATE, ...) passes through byte for byte, and what the daemon
//! writes is not touched. Re-encoding every block, rather than patching the
//! one field, keeps h2's view of HPACK state trivially right: its dynamic
//! table stays empty while this side follows the client's.

use super::hpack;
use bytes::{BufMut, Bytes, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What every HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 endpoint accepts (the protocol's default and
/// minimum SETTINGS_MAX_FRAME_SIZE), so rewritten frames always fit.
const MAX_FRAME_SIZE: usize = 16_384;
/// The HPACK table the client may use: the protocol default, which the
/// daemon's server leaves as it is.
const HEADER_TABLE_SIZE: usize = 4096;
/// The most a header block may take, encoded or decoded. h2 itself refuses
/// header lists over 16 KiB (hyper's default), so this only bounds what a
/// misbehaving client can make this layer hold before h2 says no.
const MAX_BLOCK: usize = 64 * 1024;
/// What an authority h2 would refuse becomes.
const LOCALHOST: &[u8] = b"localhost";

/// An accepted connection whose incoming header blocks are rewritten so h2
/// accepts any `:authority` (see the module docs). Writes go straight
/// through.
#[derive(Debug)]
pub(crate) struct LenientAuthority<S> {
    inner: S,
    rewriter: Rewriter,
    /// Bytes read from the client, not yet rewritten.
    input: BytesMut,
    /// Rewritten bytes not yet read by h2.
    output: BytesMut,
    eof: bool,
}

impl<S> LenientAuthority<S> {
    /// Wraps an accepted connection.
    pub(crate) fn new(inner: S) -> LenientAuthority<S> {
        LenientAuthority {
            inner,
            rewriter: Rewriter::default(),
            input: BytesMut::new(),
            output: BytesMut::new(),
            eof: false,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LenientAuthority<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A frame cut short by the end of the connection goes to h2
                // as it is, so h2 reports it as it would have.
                if this.input.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.output = this.input.split();
                continue;
            }
            if let Err(e) = this.rewriter.process(&mut this.input, &mut this.output) {
                tracing::debug!("closing a connection: {e}");
                return Poll::Ready(Err(e));
            }
            if !this.output.is_empty() {
                continue;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
            } else {
                this.input.extend_from_slice(read.filled());
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LenientAuthority<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for LenientAuthority<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The rewriting itself, without I/O: bytes from the client in, bytes for
/// h2 out.
#[derive(Debug)]
struct Rewriter {
    phase: Phase,
    decoder: hpack::Decoder,
    /// A HEADERS frame whose CONTINUATION frames have not all come yet.
    open: Option<OpenBlock>,
    /// Payload bytes of the current pass-through frame still to copy.
    passthrough: usize,
    /// Whether this connection's authority was replaced yet (logged once).
    replaced: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's preface.
    Preface,
    /// Reading frames.
    Frames,
    /// Not HTTP/2 (no preface): everything passes, for h2 to refuse.
    Raw,
}

#[derive(Debug)]
struct OpenBlock {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: BytesMut,
}

impl Default for Rewriter {
    fn default() -> Self {
        Rewriter {
            phase: Phase::Preface,
            decoder: hpack::Decoder::new(HEADER_TABLE_SIZE),
            open: None,
            passthrough: 0,
            replaced: false,
        }
    }
}

fn invalid(why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("HTTP/2 from client: {why}"),
    )
}

impl Rewriter {
    /// Moves everything it can from `input` to `output`, rewriting header
    /// blocks; what is left in `input` waits for more bytes. An error means
    /// the client broke HTTP/2 framing or HPACK in a way that leaves no
    /// sensible stream to hand on, and the connection should close.
    fn process(&mut self, input: &mut BytesMut, output: &mut BytesMut) -> io::Result<()> {
        loop {
            match self.phase {
                Phase::Raw => {
                    output.extend_from_slice(&input.split());
                    return Ok(());
                }
                Phase::Preface => {
                    let n = input.len().min(PREFACE.len());
                    if input[..n] != PREFACE[..n] {
                        self.phase = Phase::Raw;
                    } else if n == PREFACE.len() {
                        output.extend_from_slice(&input.split_to(n));
                        self.phase = Phase::Frames;
                    } else {
                        return Ok(());
                    }
                }
                Phase::Frames if self.passthrough > 0 => {
                    let n = self.passthrough.min(input.len());
                    if n == 0 {
                        return Ok(());
                    }
                    output.extend_from_slice(&input.split_to(n));
                    self.passthrough -= n;
                }
                Phase::Frames => {
                    if input.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let len = usize::from(input[0]) << 16
                        | usize::from(input[1]) << 8
                        | usize::from(input[2]);
                    let (kind, flags) = (input[3], input[4]);
                    let stream_id =
                        u32::from_be_bytes([input[5], input[6], input[7], input[8]]) & 0x7fff_ffff;
                    if kind != HEADERS && kind != CONTINUATION {
                        if self.open.is_some() {
                            return Err(invalid("a header block interrupted by another frame"));
                        }
                        output.extend_from_slice(&input.split_to(FRAME_HEADER_LEN));
                        self.passthrough = len;
                        continue;
                    }
                    if len > MAX_BLOCK {
                        return Err(invalid(format!("a {len}-byte header frame")));
                    }
                    if input.len() < FRAME_HEADER_LEN + len {
                        return Ok(());
                    }
                    let frame = input.split_to(FRAME_HEADER_LEN + len).freeze();
                    self.header_frame(kind, flags, stream_id, &frame[FRAME_HEADER_LEN..])?;
                    if flags & END_HEADERS != 0
                        && let Some(block) = self.open.take()
                    {
                        self.emit(block, output)?;
                    }
                }
            }
        }
    }

    /// Adds a HEADERS or CONTINUATION frame to the open header block.
    fn header_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream_id: u32,
        payload: &[u8],
    ) -> io::Result<()> {
        if kind == CONTINUATION {
            let Some(open) = self.open.as_mut().filter(|o| o.stream_id == stream_id) else {
                return Err(invalid("a CONTINUATION frame without its HEADERS"));
            };
            if open.fragment.len() + payload.len() > MAX_BLOCK {
                return Err(invalid(format!("a header block over {MAX_BLOCK} bytes")));
            }
            open.fragment.extend_from_slice(payload);
            return Ok(());
        }
        if self.open.is_some() {
            return Err(invalid("a header block interrupted by another frame"));
        }
        let mut rest = payload;
        let mut padding = 0;
        if flags & PADDED != 0 {
            let (&pad, after) = rest
                .split_first()
                .ok_or_else(|| invalid("a short HEADERS frame"))?;
            padding = usize::from(pad);
            rest = after;
        }
        let mut priority = None;
        if flags & PRIORITY != 0 {
            let Some((fields, after)) = rest.split_first_chunk::<5>() else {
                return Err(invalid("a short HEADERS frame"));
            };
            priority = Some(*fields);
            rest = after;
        }
        let Some(fragment) = rest.len().checked_sub(padding).map(|n| &rest[..n]) else {
            return Err(invalid("HEADERS padding longer than the frame"));
        };
        self.open = Some(OpenBlock {
            stream_id,
            end_stream: flags & END_STREAM != 0,
            priority,
            fragment: BytesMut::from(fragment),
        });
        Ok(())
    }

    /// Writes a complete header block for h2: decoded, the authority made
    /// acceptable, encoded as literals, in as many frames as it takes.
    fn emit(&mut self, open: OpenBlock, output: &mut BytesMut) -> io::Result<()> {
        let fields = self
            .decoder
            .decode(&open.fragment, MAX_BLOCK)
            .map_err(invalid)?;
        let mut block = BytesMut::with_capacity(open.fragment.len() * 2);
        for mut field in fields {
            if field.name.as_ref() == b":authority"
                && http::uri::Authority::from_maybe_shared(field.value.clone()).is_err()
            {
                if !self.replaced {
                    tracing::debug!(
                        authority = %String::from_utf8_lossy(&field.value),
                        "a client sent an authority h2 refuses; taken as localhost"
                    );
                    self.replaced = true;
                }
                field.value = Bytes::from_static(LOCALHOST);
            }
            hpack::encode_literal(&field, &mut block);
        }
        let mut block = block.freeze();
        let mut first = true;
        loop {
            let priority = open.priority.filter(|_| first);
            let room = MAX_FRAME_SIZE - if priority.is_some() { 5 } else { 0 };
            let chunk = block.split_to(room.min(block.len()));
            let mut flags = 0;
            if first && open.end_stream {
                flags |= END_STREAM;
            }
            if priority.is_some() {
                flags |= PRIORITY;
            }
            if block.is_empty() {
                flags |= END_HEADERS;
            }
            let len = chunk.len() + if priority.is_some() { 5 } else { 0 };
            // `len` is at most MAX_FRAME_SIZE, so it fits the 24-bit field.
            output.put_slice(&(len as u32).to_be_bytes()[1..]);
            output.put_u8(if first { HEADERS } else { CONTINUATION });
            output.put_u8(flags);
            output.put_u32(open.stream_id);
            if let Some(p) = priority {
                output.put_slice(&p);
            }
            output.put_slice(&chunk);
            first = false;
            if block.is_empty() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpack::{Decoder, Field};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// A header block as gRPC C-core sends it on `unix:/run/agentd.sock`:
    /// `:authority` with a literal value added to the table (name from the
    /// static table), then the rest as indexed or literal fields.
    fn grpcio_first_request() -> Vec<u8> {
        let authority = b"%2Frun%2Fagentd.sock";
        let mut b = vec![0x83, 0x86]; // :method POST, :scheme http
        b.extend([0x44, 0x0e]); // :path, literal, indexed
        b.extend(b"/agent.v1/Ping");
        b.extend([0x41, authority.len() as u8]); // :authority, literal, indexed
        b.extend(authority);
        b.extend([0x40, 0x02]); // te: trailers, new name, indexed
        b.extend(b"te");
        b.push(0x08);
        b.extend(b"trailers");
        b
    }

    /// Frames of one connection: the preface, SETTINGS, two requests (the
    /// second refers to the first's table entries), and their DATA.
    fn connection() -> Vec<u8> {
        let mut c = PREFACE.to_vec();
        c.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        c.extend(frame(HEADERS, END_HEADERS, 1, &grpcio_first_request()));
        c.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        // The newest entries: 62 = te, 63 = :authority, 64 = :path.
        c.extend(frame(
            HEADERS,
            END_HEADERS,
            3,
            &[0x83, 0x86, 0xc0, 0xbf, 0xbe],
        ));
        c.extend(frame(0x0, END_STREAM, 3, &[0, 0, 0, 0, 0]));
        c
    }

    /// Splits rewritten bytes back into the preface and frames.
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        assert!(bytes.starts_with(PREFACE), "the preface comes first");
        bytes = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
            out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        out
    }

    fn authority(fields: &[Field]) -> String {
        let f = fields.iter().find(|f| f.name.as_ref() == b":authority");
        String::from_utf8(f.unwrap().value.to_vec()).unwrap()
    }

    fn rewrite_all(input: &[u8]) -> io::Result<Vec<u8>> {
        let mut r = Rewriter::default();
        let (mut i, mut o) = (BytesMut::from(input), BytesMut::new());
        r.process(&mut i, &mut o)?;
        assert!(i.is_empty(), "everything was consumed");
        Ok(o.to_vec())
    }

    #[test]
    fn a_socket_path_authority_becomes_localhost_in_every_request() {
        let out = frames(&rewrite_all(&connection()).unwrap());
        let kinds: Vec<(u8, u8, u32)> = out.iter().map(|f| (f.0, f.1, f.2)).collect();
        assert_eq!(
            kinds,
            [
                (0x4, 0, 0),
                (HEADERS, END_HEADERS, 1),
                (0x0, END_STREAM, 1),
                (HEADERS, END_HEADERS, 3),
                (0x0, END_STREAM, 3),
            ]
        );
        // What h2 decodes: a fresh table throughout, since only literals
        // were written.
        let mut h2 = Decoder::new(HEADER_TABLE_SIZE);
        for (_, _, stream, payload) in out.iter().filter(|f| f.0 == HEADERS) {
            let fields = h2.decode(payload, MAX_BLOCK).unwrap();
            assert_eq!(authority(&fields), "localhost", "stream {stream}");
            let names: Vec<&[u8]> = fields.iter().map(|f| f.name.as_ref()).collect();
            assert_eq!(
                names,
                [&b":method"[..], b":scheme", b":path", b":authority", b"te"],
            );
            assert_eq!(fields[2].value.as_ref(), b"/agent.v1/Ping");
        }
        // The other frames are untouched.
        assert_eq!(out[0].3, [0, 3, 0, 0, 0, 100]);
        assert_eq!(out[2].3, [0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_valid_authority_is_kept() {
        let mut block = vec![0x83, 0x86, 0x84, 0x41, 0x0e];
        block.extend(b"localhost:1234");
        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
        let out = frames(&rewrite_all(&c).unwrap());
        let fields = Decoder::new(4096).decode(&out[0].3, MAX_BLOCK).unwrap();
        assert_eq!(authority(&fields), "localhost:1234");
        assert_eq!(out[0].1, END_HEADERS | END_STREAM);
    }

    #[test]
    fn any_split_of_the_input_gives_the_same_output() {
        let input = connection();
        let whole = rewrite_all(&input).unwrap();
        for step in [1, 2, 7, 9, 10, 33] {
            let mut r = Rewriter::default();
            let (mut i, mut o) = (BytesMut::new(), BytesMut::new());
            for piece in input.chunks(step) {
                i.extend_from_slice(piece);
                r.process(&mut i, &mut o).unwrap();
            }
            assert!(i.is_empty());
            assert_eq!(o.to_vec(), whole, "fed {step} bytes at a time");
        }
    }

    #[test]
    fn padding_priority_and_continuations_are_handled() {
        let block = grpcio_first_request();
        let (a, b) = block.split_at(10);
        let mut headers = vec![3u8]; // pad length
        headers.extend([0x80, 0, 0, 1, 15]); // exclusive dependency on 1, weight 15
        headers.extend(a);
        headers.extend([0, 0, 0]);
        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 5, &headers));
        c.extend(frame(CONTINUATION, END_HEADERS, 5, b));
        let out = frames(&rewrite_all(&c).unwrap());
        assert_eq!(out.len(), 1);
        let (kind, flags, stream, payload) = &out[0];
        assert_eq!(
            (*kind, *flags, *stream),
            (HEADERS, PRIORITY | END_STREAM | END_HEADERS, 5)
        );
        assert_eq!(payload[..5], [0x80, 0, 0, 1, 15]);
        let fields = Decoder::new(4096).decode(&payload[5..], MAX_BLOCK).unwrap();
        assert_eq!(authority(&fields), "localhost");
    }

    #[test]
    fn a_block_larger_than_a_frame_is_split_into_continuations() {
        // Indexed references to one 4000-byte entry decode to far more than
        // a frame holds.
        let mut block = vec![0x40, 0x01, b'x', 0x7f];
        let mut len = Vec::new();
        let mut n = 4000 - 127;
        while n >= 0x80 {
            len.push((n & 0x7f) as u8 | 0x80);
            n >>= 7;
        }
        len.push(n as u8);
        block.extend(len);
        block.extend(vec![b'v'; 4000]);
        block.extend([0xbe; 9]);
        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, END_HEADERS, 1, &block));
        let out = frames(&rewrite_all(&c).unwrap());
        assert!(out.len() >= 3, "{} frames", out.len());
        assert!(out.iter().all(|f| f.3.len() <= MAX_FRAME_SIZE));
        assert_eq!(out[0].0, HEADERS);
        assert!(out[1..].iter().all(|f| f.0 == CONTINUATION && f.2 == 1));
        let ends: Vec<bool> = out.iter().map(|f| f.1 & END_HEADERS != 0).collect();
        assert_eq!(ends.iter().filter(|e| **e).count(), 1);
        assert!(ends[ends.len() - 1]);
        let joined: Vec<u8> = out.iter().flat_map(|f| f.3.clone()).collect();
        let fields = Decoder::new(4096).decode(&joined, MAX_BLOCK).unwrap();
        assert_eq!(fields.len(), 10);
        assert!(fields.iter().all(|f| f.value.len() == 4000));
    }

    #[test]
    fn what_is_not_http2_passes_unchanged() {
        let input = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(rewrite_all(input).unwrap(), input);
    }

    #[test]
    fn broken_framing_closes_the_connection() {
        let mut c = PREFACE.to_vec();
        c.extend(frame(CONTINUATION, END_HEADERS, 1, &[0x82]));
        assert!(rewrite_all(&c).is_err(), "CONTINUATION without HEADERS");

        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, 0, 1, &[0x82]));
        c.extend(frame(0x0, 0, 1, &[]));
        assert!(rewrite_all(&c).is_err(), "DATA inside a header block");

        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, END_HEADERS, 1, &[0x80]));
        assert!(rewrite_all(&c).is_err(), "HPACK index 0");

        let mut c = PREFACE.to_vec();
        c.extend(frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x82]));
        assert!(rewrite_all(&c).is_err(), "padding past the end");

        // A header frame over the bound is refused from its frame header,
        // before its payload is buffered.
        let mut r = Rewriter::default();
        let mut i = BytesMut::from(PREFACE);
        i.extend_from_slice(&[0x01, 0x00, 0x01, HEADERS, END_HEADERS, 0, 0, 0, 1]);
        assert!(r.process(&mut i, &mut BytesMut::new()).is_err());
    }

    proptest::proptest! {
        /// Whatever a client sends after the preface, split however it
        /// comes, the rewriter neither panics nor holds more than a frame.
        #[test]
        fn arbitrary_input_never_panics(
            frames in proptest::collection::vec(
                (0u8..12, proptest::num::u8::ANY, 0u32..4, proptest::collection::vec(proptest::num::u8::ANY, 0..64)),
                0..12,
            ),
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            step in 1usize..40,
        ) {
            let mut input = PREFACE.to_vec();
            for (kind, flags, stream, payload) in &frames {
                input.extend(frame(*kind, *flags, *stream, payload));
            }
            input.extend(&tail);
            let mut r = Rewriter::default();
            let (mut i, mut o) = (BytesMut::new(), BytesMut::new());
            for piece in input.chunks(step) {
                i.extend_from_slice(piece);
                if r.process(&mut i, &mut o).is_err() {
                    break;
                }
                proptest::prop_assert!(i.len() <= FRAME_HEADER_LEN + MAX_BLOCK + step);
            }
        }

        #[test]
        fn arbitrary_header_blocks_decode_or_fail_cleanly(
            blocks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..200), 1..6),
        ) {
            let mut d = Decoder::new(HEADER_TABLE_SIZE);
            for block in &blocks {
                let _ = d.decode(block, MAX_BLOCK);
            }
        }
    }

    /// The real thing: a tonic server behind the wrapper, and a client that
    /// writes HTTP/2 by hand with the authority grpcio sends.
    #[tokio::test]
    async fn h2_serves_a_request_whose_authority_is_a_socket_path() {
        for (wrapped, want_status) in [(true, Some("200")), (false, None)] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.sock");
            let listener = tokio::net::UnixListener::bind(&path).unwrap();
            let (_reporter, health) = tonic_health::server::health_reporter();
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let server = tonic::transport::Server::builder().add_service(health);
            let task = if wrapped {
                use tokio_stream::StreamExt;
                tokio::spawn(
                    server.serve_with_incoming(incoming.map(|c| c.map(LenientAuthority::new))),
                )
            } else {
                tokio::spawn(server.serve_with_incoming(incoming))
            };
            let got = raw_health_check(&path).await;
            task.abort();
            assert_eq!(got.as_deref(), want_status, "wrapped: {wrapped}");
        }
    }

    /// Sends one Health/Check the way gRPC C-core does on `unix:PATH` and
    /// returns the response's `:status`, or None when the stream was reset.
    async fn raw_health_check(path: &std::path::Path) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::UnixStream::connect(path).await.unwrap();
        let authority = format!("{}", path.display()).replace('/', "%2F");
        let mut block = vec![0x83, 0x86, 0x44];
        let method = b"/grpc.health.v1.Health/Check";
        block.push(method.len() as u8);
        block.extend(method);
        block.extend([0x41, authority.len() as u8]);
        block.extend(authority.as_bytes());
        block.extend([0x40, 0x02]);
        block.extend(b"te");
        block.push(0x08);
        block.extend(b"trailers");
        block.extend([0x5f, 0x10]);
        block.extend(b"application/grpc");
        let mut out = PREFACE.to_vec();
        out.extend(frame(0x4, 0, 0, &[]));
        out.extend(frame(HEADERS, END_HEADERS, 1, &block));
        out.extend(frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]));
        s.write_all(&out).await.unwrap();
        let mut decoder = Decoder::new(4096);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let mut head = [0u8; 9];
            tokio::time::timeout_at(deadline, s.read_exact(&mut head))
                .await
                .expect("a frame in time")
                .unwrap();
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload).await.unwrap();
            let stream = u32::from_be_bytes(head[5..9].try_into().unwrap());
            match (head[3], stream) {
                (0x3, 1) => return None,
                (HEADERS, 1) => {
                    let fields = decoder.decode(&payload, MAX_BLOCK).unwrap();
                    let status = fields.iter().find(|f| f.name.as_ref() == b":status");
                    return status.map(|f| String::from_utf8_lossy(&f.value).into_owned());
                }
                (0x4, 0) if head[4] & 1 == 0 => {
                    s.write_all(&frame(0x4, 1, 0, &[])).await.unwrap();
                }
                _ => {}
            }
        }
    }
}
