//! Compression dictionaries: the table that maps an item's codec byte to
//! the dictionary its value was packed with.
//!
//! A codec byte holds a slot in bits 0-5 (1..=63 name a dictionary, 0
//! none) and the slot's generation modulo 4 in bits 6-7. This table knows
//! slot 0 only, plain zstd without a dictionary: values packed with it
//! need nothing from the table; any other codec byte is unknown, so such an
//! item is not trusted by a recovery and its value reads as corrupt.

/// The codec byte of a value packed without a dictionary.
pub const CODEC_PLAIN: u8 = 0;

/// The dictionaries items may name (see the module comment).
#[derive(Debug, Default)]
pub struct DictTable {
    _slots: (),
}

impl DictTable {
    /// A table with no dictionary: only [`CODEC_PLAIN`] is known.
    pub fn new() -> DictTable {
        DictTable::default()
    }

    /// Whether `codec` names something this table can decode with: slot
    /// 0, or a live slot of that generation.
    #[inline]
    pub fn knows(&self, codec: u8) -> bool {
        codec == CODEC_PLAIN
    }
}
