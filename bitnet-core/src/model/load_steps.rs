//! The load's byte work that runs on every core: re-quantizing the head to Q8_0 (in the
//! kernels' grouped layout) and copying
//! what stays in use out of the file map (`--no-mmap`). The output is cut in fixed chunks
//! handed to the threads as they free up, so the bytes never depend on the thread count,
//! and each chunk's source pages are released as soon as it is done, so a mapped source
//! and its copy are never both whole in memory.

use std::ops::Range;
use std::sync::Mutex;

use bitnet_kernels::float::{self, Q4R, Q4R_ROWS, Q6KR, Q6KR_ROWS, Q8R, Q8R_ROWS, RowFormat};
use bitnet_kernels::{AlignedVec, Isa, KernelError};

use super::FloatRows;

/// Rows of the head converted per chunk (one release of their source pages each; a whole
/// number of [`Q8R_ROWS`] groups).
const HEAD_CHUNK_ROWS: usize = 1024;
const _: () = assert!(HEAD_CHUNK_ROWS.is_multiple_of(Q8R_ROWS));
const _: () = assert!(HEAD_CHUNK_ROWS.is_multiple_of(Q6KR_ROWS));
const _: () = assert!(HEAD_CHUNK_ROWS.is_multiple_of(Q4R_ROWS));
/// Bytes copied per chunk.
const COPY_CHUNK: usize = 16 << 20;

/// Runs `f(k, chunk)` for every `out.chunks_mut(chunk)` (`k` its index) on `threads`
/// threads, the calling one included; a chunk goes to whichever thread is free first.
fn par_chunks_mut(
    out: &mut [u8],
    chunk: usize,
    threads: usize,
    f: &(dyn Fn(usize, &mut [u8]) + Sync),
) {
    let queue = Mutex::new(out.chunks_mut(chunk.max(1)).enumerate());
    let work = || {
        loop {
            // The lock is held only to take the next chunk.
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
            let Some((k, c)) = next else { break };
            f(k, c);
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads.max(1) {
            s.spawn(work);
        }
        work();
    });
}

/// The head as Q8_0 in the kernels' grouped layout ([`Q8R`]): a float head re-quantized row
/// by row (see `float::requantize_row_q8_0`), a Q8_0 head's rows as they are
/// ([`fill_groups`]).
pub(crate) fn head_q8r(
    isa: Isa,
    src: &[u8],
    head: &FloatRows,
    threads: usize,
    release: &(dyn Fn(Range<usize>) + Sync),
) -> Result<Q8R, KernelError> {
    let mut out = Q8R::zeroed(head.rows, head.cols)?;
    let gb = out.group_bytes();
    let layout = Grouped {
        fmt: RowFormat::Q8_0,
        rows: Q8R_ROWS,
        group_bytes: gb,
        write: &|rows, group| Q8R::write_group(head.cols, rows, group),
    };
    let convert = |b: &[u8], q: &mut [u8], scratch: &mut Vec<f32>| {
        float::requantize_row_q8_0(isa, head.fmt, b, q, scratch);
    };
    fill_groups(
        out.data_mut(),
        &layout,
        src,
        head,
        threads,
        &convert,
        release,
    );
    Ok(out)
}

/// The head as Q6_K in the kernels' grouped layout ([`Q6KR`]): a Q6_K head's rows as they
/// are, any other re-quantized row by row (decoded to f32, encoded by
/// `float::quantize_row_q6_k`; [`fill_groups`]).
pub(crate) fn head_q6kr(
    src: &[u8],
    head: &FloatRows,
    threads: usize,
    release: &(dyn Fn(Range<usize>) + Sync),
) -> Result<Q6KR, KernelError> {
    let mut out = Q6KR::zeroed(head.rows, head.cols)?;
    let gb = out.group_bytes();
    let layout = Grouped {
        fmt: RowFormat::Q6K,
        rows: Q6KR_ROWS,
        group_bytes: gb,
        write: &|rows, group| Q6KR::write_group(head.cols, rows, group),
    };
    let convert = reencode(head, float::quantize_row_q6_k);
    fill_groups(
        out.data_mut(),
        &layout,
        src,
        head,
        threads,
        &convert,
        release,
    );
    Ok(out)
}

/// A head row of any format decoded to f32 and encoded again by `encode` (the grouped
/// layouts' conversion of a head not already in their format).
fn reencode(
    head: &FloatRows,
    encode: fn(&[f32], &mut [u8]),
) -> impl Fn(&[u8], &mut [u8], &mut Vec<f32>) + Sync + '_ {
    move |b, q, f| {
        f.resize(head.cols, 0.0);
        float::dequantize_row(head.fmt, b, f);
        encode(f, q);
    }
}

/// One source row to the layout's format (`row`, `out`, scratch floats).
type ConvertRow<'a> = &'a (dyn Fn(&[u8], &mut [u8], &mut Vec<f32>) + Sync);

/// A grouped head layout as [`fill_groups`] writes it: rows in `fmt` go in `rows` at a time,
/// each group `group_bytes` long, through `write(rows, group)`.
struct Grouped<'a> {
    fmt: RowFormat,
    rows: usize,
    group_bytes: usize,
    write: &'a (dyn Fn(&[u8], &mut [u8]) + Sync),
}

/// Fills `data` (a grouped head's buffer, [`HEAD_CHUNK_ROWS`] rows a chunk over `threads`)
/// from the head's rows `src`: each group's rows in the layout's format, copied if the head
/// is already in it, else `convert(row, out, scratch)`, then written in place.
/// `release(range)` is told each source byte range (relative to `src`) once it is converted.
fn fill_groups(
    data: &mut [u8],
    layout: &Grouped<'_>,
    src: &[u8],
    head: &FloatRows,
    threads: usize,
    convert: ConvertRow<'_>,
    release: &(dyn Fn(Range<usize>) + Sync),
) {
    let rb = layout.fmt.row_bytes(head.cols).unwrap_or(0);
    let (gb, gr) = (layout.group_bytes, layout.rows);
    if rb == 0 || gb == 0 {
        return;
    }
    par_chunks_mut(data, HEAD_CHUNK_ROWS / gr * gb, threads, &|k, dst| {
        let first = k * HEAD_CHUNK_ROWS;
        let last = (first + dst.len() / gb * gr).min(head.rows);
        let from = first * head.row_bytes..last * head.row_bytes;
        let mut rows = vec![0u8; gr * rb];
        let mut scratch = Vec::new();
        for (g, group) in dst.chunks_exact_mut(gb).enumerate() {
            let r0 = first + g * gr;
            let n = (head.rows - r0).min(gr);
            let src_rows = &src[r0 * head.row_bytes..(r0 + n) * head.row_bytes];
            let rows = &mut rows[..n * rb];
            if head.fmt == layout.fmt {
                rows.copy_from_slice(src_rows);
            } else {
                let pairs = src_rows
                    .chunks_exact(head.row_bytes)
                    .zip(rows.chunks_exact_mut(rb));
                for (b, q) in pairs {
                    convert(b, q, &mut scratch);
                }
            }
            (layout.write)(rows, group);
        }
        release(from);
    });
}

/// The head as Q4_0 in the kernels' grouped layout ([`Q4R`]): a Q4_0 head's rows as they
/// are, any other re-quantized row by row (decoded to f32, encoded by
/// `float::quantize_row_q4_0`; [`fill_groups`]).
pub(crate) fn head_q4r(
    src: &[u8],
    head: &FloatRows,
    threads: usize,
    release: &(dyn Fn(Range<usize>) + Sync),
) -> Result<Q4R, KernelError> {
    let mut out = Q4R::zeroed(head.rows, head.cols)?;
    let gb = out.group_bytes();
    let layout = Grouped {
        fmt: RowFormat::Q4_0,
        rows: Q4R_ROWS,
        group_bytes: gb,
        write: &|rows, group| Q4R::write_group(head.cols, rows, group),
    };
    let convert = reencode(head, float::quantize_row_q4_0);
    fill_groups(
        out.data_mut(),
        &layout,
        src,
        head,
        threads,
        &convert,
        release,
    );
    Ok(out)
}

/// An aligned copy of `src`; `release(range)` is told each byte range of `src` once copied.
pub(crate) fn copy_out(
    src: &[u8],
    threads: usize,
    release: &(dyn Fn(Range<usize>) + Sync),
) -> AlignedVec<u8> {
    let mut out = AlignedVec::<u8>::zeroed_huge(src.len());
    par_chunks_mut(&mut out, COPY_CHUNK, threads, &|k, dst| {
        let from = k * COPY_CHUNK..k * COPY_CHUNK + dst.len();
        dst.copy_from_slice(&src[from.clone()]);
        release(from);
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Blob;

    fn f16_rows(rows: usize, cols: usize) -> (Vec<u8>, FloatRows) {
        let mut state = 7u64;
        let bytes: Vec<u8> = (0..rows * cols)
            .flat_map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let x = state;
                float::f32_to_f16((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5).to_le_bytes()
            })
            .collect();
        let head = FloatRows {
            fmt: RowFormat::F16,
            blob: Blob::File(0..bytes.len()),
            rows,
            cols,
            row_bytes: 2 * cols,
        };
        (bytes, head)
    }

    #[test]
    fn head_bytes_do_not_depend_on_the_thread_count() {
        // 2.5 chunks of rows and a part group: a short last chunk, more chunks than some
        // thread counts.
        let rows = HEAD_CHUNK_ROWS * 5 / 2 + 7;
        let (src, head) = f16_rows(rows, 64);
        let released = Mutex::new(Vec::new());
        let release = |r: Range<usize>| released.lock().unwrap().push(r);
        let one = head_q8r(Isa::Scalar, &src, &head, 1, &release).unwrap();
        // The reference, row by row.
        let mut x = vec![0.0f32; 64];
        let rb = RowFormat::Q8_0.row_bytes(64).unwrap();
        let (mut want, mut got) = (vec![0u8; rb], vec![0u8; rb]);
        let mut q8_rows = Vec::new();
        for (r, row) in src.chunks_exact(128).enumerate() {
            float::dequantize_row(RowFormat::F16, row, &mut x);
            float::quantize_row_q8_0(&x, &mut want);
            one.q8_0_row(r, &mut got);
            assert_eq!(got, want, "row {r}");
            q8_rows.extend_from_slice(&want);
        }
        for isa in Isa::available() {
            for threads in [1, 2, 3, 8] {
                let got = head_q8r(isa, &src, &head, threads, &release).unwrap();
                assert_eq!(got.bytes(), one.bytes(), "{isa}, {threads} threads");
            }
        }
        // Every source byte was released, chunk by chunk.
        let mut r = released.into_inner().unwrap();
        r.sort_by_key(|r| r.start);
        r.dedup();
        assert_eq!(r.len(), 3);
        assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(r.last().unwrap().end, src.len());
        // A Q8_0 head's rows are taken as they are.
        let q8_head = FloatRows {
            fmt: RowFormat::Q8_0,
            blob: Blob::File(0..q8_rows.len()),
            rows,
            cols: 64,
            row_bytes: rb,
        };
        let from_q8 = head_q8r(Isa::Scalar, &q8_rows, &q8_head, 2, &|_| {}).unwrap();
        assert_eq!(from_q8.bytes(), one.bytes());
    }

    #[test]
    fn q6k_groups_do_not_depend_on_the_thread_count() {
        // As above for the grouped Q6_K head: a float head re-quantized row by row, a Q6_K
        // head's rows as they are.
        let (rows, cols) = (HEAD_CHUNK_ROWS * 5 / 2 + 7, 256);
        let (src, head) = f16_rows(rows, cols);
        let one = head_q6kr(&src, &head, 1, &|_| {}).unwrap();
        let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
        let mut x = vec![0.0f32; cols];
        let (mut want, mut got) = (vec![0u8; rb], vec![0u8; rb]);
        let mut q6_rows = Vec::new();
        for (r, row) in src.chunks_exact(2 * cols).enumerate() {
            float::dequantize_row(RowFormat::F16, row, &mut x);
            float::quantize_row_q6_k(&x, &mut want);
            one.q6k_row(r, &mut got);
            assert_eq!(got, want, "row {r}");
            q6_rows.extend_from_slice(&want);
        }
        for threads in [2, 3, 8] {
            let got = head_q6kr(&src, &head, threads, &|_| {}).unwrap();
            assert_eq!(got.bytes(), one.bytes(), "{threads} threads");
        }
        let q6_head = FloatRows {
            fmt: RowFormat::Q6K,
            blob: Blob::File(0..q6_rows.len()),
            rows,
            cols,
            row_bytes: rb,
        };
        let from_q6 = head_q6kr(&q6_rows, &q6_head, 2, &|_| {}).unwrap();
        assert_eq!(from_q6.bytes(), one.bytes());
    }

    #[test]
    fn copies_do_not_depend_on_the_thread_count() {
        let src: Vec<u8> = (0..COPY_CHUNK * 2 + 12345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        for threads in [1, 2, 5] {
            let released = Mutex::new(0usize);
            let got = copy_out(&src, threads, &|r| *released.lock().unwrap() += r.len());
            assert_eq!(&got[..], &src[..], "{threads} threads");
            assert_eq!(released.into_inner().unwrap(), src.len());
        }
    }
}
