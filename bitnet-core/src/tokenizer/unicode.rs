//! Character classes used by the pre-tokenizers, and GPT-2's byte <-> character mapping.
//!
//! The regexes of byte-level BPE tokenizers speak of Unicode general categories (`\p{L}`,
//! `\p{N}`, `\p{P}`) and of `\s` (the White_Space property). Rust's `char` has no general
//! category, and `char::is_alphabetic` is the wider Alphabetic property (it also takes
//! combining vowel signs, which `\p{L}` does not), so the category ranges are taken once from
//! `regex-syntax`'s Unicode tables and flattened into a flag table for the BMP plus sorted
//! ranges above it.

use std::sync::OnceLock;

/// `\p{L}`.
pub(crate) const LETTER: u8 = 1;
/// `\p{N}`.
pub(crate) const NUMBER: u8 = 2;
/// `\p{P}`.
pub(crate) const PUNCT: u8 = 4;
/// `\s`: the White_Space property.
pub(crate) const SPACE: u8 = 8;
/// Set on every real character; a position outside the text being split has no flags at
/// all, which is how the splitters tell "end of fragment" from "unassigned character".
pub(crate) const IN_TEXT: u8 = 16;

const BMP: usize = 0x1_0000;

struct Tables {
    bmp: Box<[u8]>,
    /// (first, last, flags) above the BMP, sorted and disjoint.
    astral: Vec<(u32, u32, u8)>,
}

fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    // The patterns are constants of this file; a parse failure would be a bug in it, and the
    // worst outcome is an empty class, never a panic.
    let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(c)) => c
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        _ => Vec::new(),
    }
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut bmp = vec![0u8; BMP].into_boxed_slice();
        let mut astral_points: Vec<(u32, u32, u8)> = Vec::new();
        for (pattern, flag) in [(r"\p{L}", LETTER), (r"\p{N}", NUMBER), (r"\p{P}", PUNCT)] {
            for (lo, hi) in class_ranges(pattern) {
                for cp in lo..=hi.min(BMP as u32 - 1) {
                    bmp[cp as usize] |= flag;
                }
                if hi >= BMP as u32 {
                    astral_points.push((lo.max(BMP as u32), hi, flag));
                }
            }
        }
        for cp in 0..BMP as u32 {
            if char::from_u32(cp).is_some_and(char::is_whitespace) {
                bmp[cp as usize] |= SPACE;
            }
        }
        // The three categories are disjoint, so the astral ranges never overlap.
        astral_points.sort_unstable();
        Tables {
            bmp,
            astral: astral_points,
        }
    })
}

/// The class flags of `c` (always including [`IN_TEXT`]).
pub(crate) fn flags(c: char) -> u8 {
    let cp = c as u32;
    let t = tables();
    let f = if (cp as usize) < BMP {
        t.bmp[cp as usize]
    } else {
        let i = t.astral.partition_point(|&(_, hi, _)| hi < cp);
        match t.astral.get(i) {
            Some(&(lo, _, f)) if lo <= cp => f,
            _ => 0,
        }
    };
    f | IN_TEXT
}

/// GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves,
/// the other 68 bytes get U+0100.. in byte order.
pub(crate) fn byte_to_char_table() -> &'static [char; 256] {
    static TABLE: OnceLock<[char; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = ['\0'; 256];
        let mut next = 256u32;
        for (b, slot) in t.iter_mut().enumerate() {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cp = if printable {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            *slot = char::from_u32(cp).unwrap_or('\u{FFFD}');
        }
        t
    })
}

/// The byte a GPT-2 stand-in character represents, if it is one.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static TABLE: OnceLock<[u8; 324]> = OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u8; 324];
        for (b, &c) in byte_to_char_table().iter().enumerate() {
            t[c as usize] = b as u8;
        }
        t
    });
    let cp = c as usize;
    if cp >= t.len() {
        return None;
    }
    let b = t[cp];
    // Only index 0 maps to byte 0 through '\u{100}'; every other zero entry is a hole.
    if b == 0 && cp != 0x100 {
        return None;
    }
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories() {
        assert_eq!(flags('a') & LETTER, LETTER);
        assert_eq!(flags('Ж') & LETTER, LETTER);
        assert_eq!(flags('我') & LETTER, LETTER);
        assert_eq!(flags('7') & NUMBER, NUMBER);
        assert_eq!(flags('½') & NUMBER, NUMBER);
        assert_eq!(flags('!') & PUNCT, PUNCT);
        assert_eq!(flags('$') & (PUNCT | LETTER | NUMBER), 0);
        assert_eq!(flags('\u{3000}') & SPACE, SPACE);
        // A Khmer vowel sign is Alphabetic but not a letter (Mc).
        assert_eq!(flags('\u{17B6}') & LETTER, 0);
        // Astral: Gothic letter, mathematical digit, an emoji.
        assert_eq!(flags('\u{10330}') & LETTER, LETTER);
        assert_eq!(flags('\u{1D7CE}') & NUMBER, NUMBER);
        assert_eq!(flags('🦙') & (LETTER | NUMBER | PUNCT | SPACE), 0);
        assert_eq!(flags('🦙') & IN_TEXT, IN_TEXT);
    }

    #[test]
    fn byte_map_round_trips() {
        let t = byte_to_char_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'A' as usize], 'A');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(char_to_byte('\u{2581}'), None);
        assert_eq!(char_to_byte(' '), None);
    }
}
