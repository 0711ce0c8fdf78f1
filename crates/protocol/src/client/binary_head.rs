//! A binary header's framing fields, read from its first 24 bytes: shared
//! by the request framer (`frame`), the reply framer (`reply`) and the
//! server's prefetch peek (`peek`).

use crate::binary::HEADER_LEN;

/// The fields of a binary header (request or response) that frame it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryHead {
    /// REQUEST_MAGIC or RESPONSE_MAGIC (or another byte: not a packet).
    pub magic: u8,
    /// The command.
    pub opcode: u8,
    /// Length of the key.
    pub key_len: usize,
    /// Length of the extras.
    pub extras: usize,
    /// A response's status (a request's vbucket).
    pub status: u16,
    /// Length of the body: extras, key and value.
    pub body: usize,
    /// The request's opaque (echoed by the response).
    pub opaque: u32,
}

impl BinaryHead {
    /// The header at the front of `buf`, once its 24 bytes have arrived.
    #[inline]
    pub fn parse(buf: &[u8]) -> Option<BinaryHead> {
        let h = buf.get(..HEADER_LEN)?;
        Some(BinaryHead {
            magic: h[0],
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]) as usize,
            extras: h[4] as usize,
            status: u16::from_be_bytes([h[6], h[7]]),
            body: u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize,
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        })
    }

    /// Header and body: the whole packet's length.
    #[inline]
    pub fn packet_len(&self) -> usize {
        HEADER_LEN.saturating_add(self.body)
    }

    /// Where the key lies in the packet.
    #[inline]
    pub fn key_range(&self) -> std::ops::Range<usize> {
        let start = HEADER_LEN + self.extras;
        start..start + self.key_len
    }
}
