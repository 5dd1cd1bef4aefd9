//! HPACK (RFC 7541), as much as [`super::authority`] needs: a decoder that
//! follows a client's compression state, and an encoder that writes fields
//! back as plain literals.
//!
//! h2 has its own HPACK code but keeps it private, so the authority fix
//! cannot reuse it; the format is small and fixed, and the RFC's examples
//! (Appendix C) test this one below.

use bytes::{BufMut, Bytes, BytesMut};
use std::collections::VecDeque;
use std::sync::OnceLock;

/// Why a header block could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum DecodeError {
    /// The block ends inside a field.
    #[error("header block truncated")]
    Truncated,
    /// An integer does not fit.
    #[error("integer overflow in header block")]
    IntegerOverflow,
    /// Index 0, or past the static and dynamic tables.
    #[error("invalid header table index {0}")]
    InvalidIndex(usize),
    /// A Huffman string with a bad code, padding or the EOS symbol.
    #[error("invalid Huffman string")]
    InvalidHuffman,
    /// A dynamic table size update that is too large or out of place.
    #[error("invalid dynamic table size update to {0}")]
    InvalidSizeUpdate(usize),
    /// The decoded header list is larger than the caller allows.
    #[error("header list larger than {0} bytes")]
    ListTooLarge(usize),
}

/// One decoded header field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Field {
    /// The name, as sent (pseudo-headers start with `:`).
    pub name: Bytes,
    /// The value, as sent.
    pub value: Bytes,
    /// The client asked that no intermediary ever index it.
    pub never_indexed: bool,
}

impl Field {
    /// The size RFC 7541 §4.1 counts for it: name, value and 32 bytes.
    fn size(&self) -> usize {
        self.name.len() + self.value.len() + 32
    }
}

/// The decoding state of one direction of one connection: its dynamic table.
#[derive(Debug)]
pub(super) struct Decoder {
    table: VecDeque<Field>,
    table_size: usize,
    max_table_size: usize,
    /// What the peer allowed the encoder (SETTINGS_HEADER_TABLE_SIZE).
    settings_limit: usize,
}

impl Decoder {
    /// A decoder whose encoder may use a table of up to `settings_limit`
    /// bytes (the SETTINGS_HEADER_TABLE_SIZE this side advertised).
    pub(super) fn new(settings_limit: usize) -> Decoder {
        Decoder {
            table: VecDeque::new(),
            table_size: 0,
            max_table_size: settings_limit,
            settings_limit,
        }
    }

    /// Decodes one complete header block, updating the dynamic table as the
    /// encoder did. Fails when the fields would add up to more than
    /// `max_list_size` bytes (counted as RFC 7541 counts table entries).
    pub(super) fn decode(
        &mut self,
        block: &[u8],
        max_list_size: usize,
    ) -> Result<Vec<Field>, DecodeError> {
        let mut buf = block;
        let mut fields = Vec::new();
        let mut list_size = 0usize;
        while let Some(&first) = buf.first() {
            let field = if first & 0x80 != 0 {
                let index = integer(&mut buf, 7)?;
                self.get(index)?
            } else if first & 0xc0 == 0x40 {
                let field = self.literal(&mut buf, 6, false)?;
                self.insert(field.clone());
                field
            } else if first & 0xe0 == 0x20 {
                // Size updates may only open a block (RFC 7541 §4.2).
                let size = integer(&mut buf, 5)?;
                if !fields.is_empty() || size > self.settings_limit {
                    return Err(DecodeError::InvalidSizeUpdate(size));
                }
                self.max_table_size = size;
                self.evict(0);
                continue;
            } else {
                let never_indexed = first & 0xf0 == 0x10;
                self.literal(&mut buf, 4, never_indexed)?
            };
            list_size = list_size.saturating_add(field.size());
            if list_size > max_list_size {
                return Err(DecodeError::ListTooLarge(max_list_size));
            }
            fields.push(field);
        }
        Ok(fields)
    }

    /// A literal field whose name index has a `prefix`-bit prefix.
    fn literal(
        &self,
        buf: &mut &[u8],
        prefix: u8,
        never_indexed: bool,
    ) -> Result<Field, DecodeError> {
        let name_index = integer(buf, prefix)?;
        let name = if name_index == 0 {
            string(buf)?
        } else {
            self.get(name_index)?.name
        };
        let value = string(buf)?;
        Ok(Field {
            name,
            value,
            never_indexed,
        })
    }

    /// The entry at `index`: the static table first, then the dynamic one.
    fn get(&self, index: usize) -> Result<Field, DecodeError> {
        let field = match index {
            0 => None,
            1..=STATIC_LEN => STATIC.get(index - 1).map(|(name, value)| Field {
                name: Bytes::from_static(name.as_bytes()),
                value: Bytes::from_static(value.as_bytes()),
                never_indexed: false,
            }),
            _ => self.table.get(index - STATIC_LEN - 1).map(|f| Field {
                never_indexed: false,
                ..f.clone()
            }),
        };
        field.ok_or(DecodeError::InvalidIndex(index))
    }

    /// Adds an entry, evicting the oldest to make room (RFC 7541 §4.4: an
    /// entry larger than the whole table empties it and is not added).
    fn insert(&mut self, field: Field) {
        let size = field.size();
        self.evict(size);
        if size <= self.max_table_size {
            self.table_size += size;
            self.table.push_front(field);
        }
    }

    /// Evicts the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.table_size + room > self.max_table_size {
            match self.table.pop_back() {
                Some(old) => self.table_size -= old.size(),
                None => break,
            }
        }
    }
}

/// Appends `field` as a literal without indexing (or never indexed, when the
/// client marked it so) with a literal name, so the reader's dynamic table
/// stays empty and no state has to be kept in step with it.
pub(super) fn encode_literal(field: &Field, dst: &mut BytesMut) {
    dst.put_u8(if field.never_indexed { 0x10 } else { 0x00 });
    put_string(&field.name, dst);
    put_string(&field.value, dst);
}

fn put_string(s: &[u8], dst: &mut BytesMut) {
    put_integer(0x00, 7, s.len(), dst);
    dst.put_slice(s);
}

/// An integer with an `prefix`-bit prefix whose first byte also carries
/// `flags` (RFC 7541 §5.1).
fn put_integer(flags: u8, prefix: u8, mut value: usize, dst: &mut BytesMut) {
    let max = (1usize << prefix) - 1;
    if value < max {
        dst.put_u8(flags | value as u8);
        return;
    }
    dst.put_u8(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        dst.put_u8((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    dst.put_u8(value as u8);
}

/// Reads an integer with a `prefix`-bit prefix (RFC 7541 §5.1).
fn integer(buf: &mut &[u8], prefix: u8) -> Result<usize, DecodeError> {
    let (&first, rest) = buf.split_first().ok_or(DecodeError::Truncated)?;
    *buf = rest;
    let max = (1usize << prefix) - 1;
    let mut value = usize::from(first) & max;
    if value < max {
        return Ok(value);
    }
    // Five continuation bytes carry 35 bits: far more than any size or
    // index in a header block can need.
    for shift in (0..35).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or(DecodeError::Truncated)?;
        *buf = rest;
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::IntegerOverflow)
}

/// Reads a string literal, Huffman-coded or not (RFC 7541 §5.2).
fn string(buf: &mut &[u8]) -> Result<Bytes, DecodeError> {
    let huffman = buf.first().is_some_and(|b| b & 0x80 != 0);
    let len = integer(buf, 7)?;
    if len > buf.len() {
        return Err(DecodeError::Truncated);
    }
    let (raw, rest) = buf.split_at(len);
    *buf = rest;
    if huffman {
        huffman_decode(raw).map(Bytes::from)
    } else {
        Ok(Bytes::copy_from_slice(raw))
    }
}

/// The canonical Huffman code of RFC 7541 Appendix B, arranged for decoding:
/// the code is canonical (codes of one length are consecutive, in symbol
/// order), so the bit length of every symbol is all it takes to rebuild it.
struct HuffmanTable {
    /// Symbols ordered by code length, then value.
    symbols: Vec<u16>,
    /// Per length: the first code of that length, how many there are, and
    /// where they start in `symbols`.
    first_code: [u32; 31],
    count: [u32; 31],
    start: [usize; 31],
}

fn huffman_table() -> &'static HuffmanTable {
    static TABLE: OnceLock<HuffmanTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..=256).collect();
        symbols.sort_by_key(|&s| (HUFFMAN_LENGTHS[usize::from(s)], s));
        let mut count = [0u32; 31];
        for &len in &HUFFMAN_LENGTHS {
            count[usize::from(len)] += 1;
        }
        let (mut first_code, mut start) = ([0u32; 31], [0usize; 31]);
        let (mut code, mut index) = (0u32, 0usize);
        for len in 1..31 {
            code = (code + count[len - 1]) << 1;
            first_code[len] = code;
            index += count[len - 1] as usize;
            start[len] = index;
        }
        HuffmanTable {
            symbols,
            first_code,
            count,
            start,
        }
    })
}

/// Decodes a Huffman-coded string (RFC 7541 §5.2): the padding must be at
/// most 7 one-bits, and the EOS symbol must not appear.
fn huffman_decode(raw: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let table = huffman_table();
    let mut out = Vec::with_capacity(raw.len() * 8 / 5);
    let (mut code, mut len) = (0u32, 0usize);
    for byte in raw {
        for bit in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> bit) & 1);
            len += 1;
            if len > 30 {
                return Err(DecodeError::InvalidHuffman);
            }
            let offset = code.wrapping_sub(table.first_code[len]);
            if code >= table.first_code[len] && offset < table.count[len] {
                let symbol = table.symbols[table.start[len] + offset as usize];
                let byte = u8::try_from(symbol).map_err(|_| DecodeError::InvalidHuffman)?;
                out.push(byte);
                (code, len) = (0, 0);
            }
        }
    }
    if len > 7 || code != (1 << len) - 1 {
        return Err(DecodeError::InvalidHuffman);
    }
    Ok(out)
}

/// The bit length of each symbol's code (0–255, then EOS), RFC 7541
/// Appendix B.
const HUFFMAN_LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

const STATIC_LEN: usize = 61;

/// The static table, RFC 7541 Appendix A (index 1 first).
const STATIC: [(&str, &str); STATIC_LEN] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn pairs(fields: &[Field]) -> Vec<(String, String)> {
        fields
            .iter()
            .map(|f| {
                (
                    String::from_utf8_lossy(&f.name).into_owned(),
                    String::from_utf8_lossy(&f.value).into_owned(),
                )
            })
            .collect()
    }

    fn table(d: &Decoder) -> Vec<(String, String)> {
        pairs(&d.table.iter().cloned().collect::<Vec<_>>())
    }

    fn owned(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// RFC 7541 C.3 and C.4: three requests on one connection, without and
    /// with Huffman coding; the same fields and the same table either way.
    #[test]
    fn decodes_the_rfc_request_examples() {
        let blocks = [
            (
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            ),
            (
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8286 84be 5886 a8eb 1064 9cbf",
            ),
            (
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ),
        ];
        let expected = [
            owned(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ]),
            owned(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ]),
            owned(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ]),
        ];
        let (mut plain, mut huffman) = (Decoder::new(4096), Decoder::new(4096));
        for ((p, h), want) in blocks.iter().zip(&expected) {
            assert_eq!(&pairs(&plain.decode(&hex(p), 1 << 16).unwrap()), want);
            assert_eq!(&pairs(&huffman.decode(&hex(h), 1 << 16).unwrap()), want);
        }
        let want = owned(&[
            ("custom-key", "custom-value"),
            ("cache-control", "no-cache"),
            (":authority", "www.example.com"),
        ]);
        assert_eq!(table(&plain), want);
        assert_eq!(table(&huffman), want);
        assert_eq!(plain.table_size, 164);
    }

    /// RFC 7541 C.6: responses with Huffman coding in a 256-byte table, so
    /// entries are evicted on the way.
    #[test]
    fn decodes_the_rfc_response_examples_with_eviction() {
        let mut d = Decoder::new(256);
        let first = d
            .decode(
                &hex("4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                      2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"),
                1 << 16,
            )
            .unwrap();
        assert_eq!(
            pairs(&first),
            owned(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ])
        );
        d.decode(&hex("4883 640e ff c1 c0 bf"), 1 << 16).unwrap();
        let third = d
            .decode(
                &hex("88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                      77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                      9587 3160 65c0 03ed 4ee5 b106 3d50 07"),
                1 << 16,
            )
            .unwrap();
        assert_eq!(
            pairs(&third),
            owned(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                (
                    "set-cookie",
                    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
                ),
            ])
        );
        assert_eq!(d.table_size, 215);
        assert_eq!(table(&d).len(), 3);
    }

    #[test]
    fn every_byte_survives_a_huffman_round_trip() {
        // Encode with the canonical codes rebuilt from the lengths, decode
        // with the decoder: every symbol, in one string.
        let t = huffman_table();
        let mut codes = [(0u32, 0u8); 257];
        for (len, (&first, &start)) in t.first_code.iter().zip(&t.start).enumerate().skip(1) {
            for i in 0..t.count[len] {
                let symbol = t.symbols[start + i as usize];
                codes[usize::from(symbol)] = (first + i, len as u8);
            }
        }
        // Spot checks against Appendix B.
        assert_eq!(codes[usize::from(b'0')], (0x0, 5));
        assert_eq!(codes[usize::from(b' ')], (0x14, 6));
        assert_eq!(codes[usize::from(b'a')], (0x3, 5));
        assert_eq!(codes[256], (0x3fff_ffff, 30));
        let input: Vec<u8> = (0..=255).collect();
        let (mut bits, mut acc, mut raw) = (0u32, 0u64, Vec::new());
        for &b in &input {
            let (code, len) = codes[usize::from(b)];
            acc = (acc << len) | u64::from(code);
            bits += u32::from(len);
            while bits >= 8 {
                raw.push((acc >> (bits - 8)) as u8);
                bits -= 8;
            }
        }
        if bits > 0 {
            raw.push(((acc << (8 - bits)) as u8) | ((1u8 << (8 - bits)) - 1));
        }
        assert_eq!(huffman_decode(&raw).unwrap(), input);
    }

    #[test]
    fn bad_huffman_padding_and_eos_are_refused() {
        // "a" (00011) padded with zeros instead of ones.
        assert_eq!(
            huffman_decode(&[0b0001_1000]),
            Err(DecodeError::InvalidHuffman)
        );
        // Eight bits of padding.
        assert_eq!(
            huffman_decode(&[0b0001_1111, 0xff]),
            Err(DecodeError::InvalidHuffman)
        );
        // The EOS symbol itself.
        assert_eq!(
            huffman_decode(&[0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::InvalidHuffman)
        );
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let mut d = Decoder::new(4096);
        assert_eq!(
            d.decode(&[0x80], 1 << 16),
            Err(DecodeError::InvalidIndex(0))
        );
        assert_eq!(
            d.decode(&[0xbe], 1 << 16),
            Err(DecodeError::InvalidIndex(62))
        );
        assert_eq!(
            d.decode(&[0x41, 0x05, b'a'], 1 << 16),
            Err(DecodeError::Truncated)
        );
        assert_eq!(
            d.decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1 << 16),
            Err(DecodeError::IntegerOverflow)
        );
        // A size update past the settings, and one after a field.
        assert_eq!(
            d.decode(&[0x3f, 0xe2, 0x1f], 1 << 16),
            Err(DecodeError::InvalidSizeUpdate(4097))
        );
        assert_eq!(
            d.decode(&[0x82, 0x20], 1 << 16),
            Err(DecodeError::InvalidSizeUpdate(0))
        );
        // Ten references to one entry count ten times.
        let mut block = hex("4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        block.extend(std::iter::repeat_n(0xbe, 10));
        assert_eq!(d.decode(&block, 500), Err(DecodeError::ListTooLarge(500)));
    }

    #[test]
    fn literals_written_read_back_the_same() {
        let fields = vec![
            Field {
                name: Bytes::from_static(b":authority"),
                value: Bytes::from(vec![b'x'; 300]),
                never_indexed: false,
            },
            Field {
                name: Bytes::from_static(b"authorization"),
                value: Bytes::from_static(b"secret"),
                never_indexed: true,
            },
        ];
        let mut block = BytesMut::new();
        for f in &fields {
            encode_literal(f, &mut block);
        }
        let mut d = Decoder::new(4096);
        assert_eq!(d.decode(&block, 1 << 16).unwrap(), fields);
        assert!(d.table.is_empty(), "literals leave the table alone");
    }
}
