//! The BitNet b1.58 2B-4T matrix shapes the kernel figures are measured on, shared by the
//! examples and the criterion bench (each includes this file with `#[path]`; not every one
//! uses every table).
#![allow(dead_code)]

/// Rows x cols of each distinct projection, and the tied output head.
pub const SHAPES: [(&str, usize, usize); 5] = [
    ("attn q/o 2560x2560", 2560, 2560),
    ("attn k/v 640x2560", 640, 2560),
    ("ffn up/gate 6912x2560", 6912, 2560),
    ("ffn down 2560x6912", 2560, 6912),
    ("head 128256x2560", 128256, 2560),
];

/// One transformer layer: q, k, v, o, gate, up, down.
pub const LAYER: [(usize, usize); 7] = [
    (2560, 2560),
    (640, 2560),
    (640, 2560),
    (2560, 2560),
    (6912, 2560),
    (6912, 2560),
    (2560, 6912),
];
