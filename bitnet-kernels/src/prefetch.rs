//! Cache-line prefetch hints for loops whose source the hardware prefetchers lose (at 4 KiB
//! page boundaries), and the process's policy for the one-token ternary kernels' weight
//! stream ([`stream_prefetch`]). Not a kernel: x86-64's prefetch is baseline SSE and
//! AArch64's `PRFM` is in the base ISA, so neither needs a token.

use std::sync::OnceLock;

use crate::error::KernelError;

/// Environment variable that sets [`stream_prefetch`]: `auto` (the default), `tuned`,
/// `off`, `l1` or `l2`.
pub const PREFETCH_ENV: &str = "BITNET_PREFETCH";

/// How the x86-64 one-token ternary kernels (decode's weight stream) prefetch their weights.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StreamPrefetch {
    /// Each kernel set's own measured choice (AVX-512 and AVX-VNNI into L1, AVX2 into L2,
    /// 4 KiB ahead).
    Tuned,
    /// No software prefetch: the hardware prefetchers alone.
    Off,
    /// 4 KiB ahead into L1.
    L1,
    /// 4 KiB ahead into L2.
    L2,
}

impl StreamPrefetch {
    pub fn name(self) -> &'static str {
        match self {
            StreamPrefetch::Tuned => "tuned",
            StreamPrefetch::Off => "off",
            StreamPrefetch::L1 => "l1",
            StreamPrefetch::L2 => "l2",
        }
    }

    /// A policy by name; `auto` is this CPU's ([`StreamPrefetch::for_cpu`]).
    pub fn parse(name: &str) -> Result<StreamPrefetch, KernelError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(StreamPrefetch::for_cpu()),
            "tuned" => Ok(StreamPrefetch::Tuned),
            "off" | "none" => Ok(StreamPrefetch::Off),
            "l1" => Ok(StreamPrefetch::L1),
            "l2" => Ok(StreamPrefetch::L2),
            _ => Err(KernelError::UnknownPrefetch {
                name: name.to_string(),
            }),
        }
    }

    /// `BITNET_PREFETCH` if set (an error if unknown), else this CPU's policy.
    pub fn from_env() -> Result<StreamPrefetch, KernelError> {
        match std::env::var(PREFETCH_ENV) {
            Ok(v) => StreamPrefetch::parse(&v),
            Err(_) => Ok(StreamPrefetch::for_cpu()),
        }
    }

    /// The policy measured best on this CPU: off on Zen 4 (its hardware prefetchers keep up
    /// with the stream, and software requests slowed one-token decode to 0.70 of a plain
    /// read), the kernels' own choice elsewhere (measured on Zen 5 and Intel; Zen 3 keeps it,
    /// unmeasured).
    pub fn for_cpu() -> StreamPrefetch {
        if amd_signature().is_some_and(|(family, model)| is_zen4(family, model)) {
            StreamPrefetch::Off
        } else {
            StreamPrefetch::Tuned
        }
    }
}

/// The process's stream prefetch policy: [`StreamPrefetch::from_env`], read once (an unknown
/// `BITNET_PREFETCH` falls back to this CPU's policy here; the model loader refuses it).
pub fn stream_prefetch() -> StreamPrefetch {
    static POLICY: OnceLock<StreamPrefetch> = OnceLock::new();
    *POLICY.get_or_init(|| StreamPrefetch::from_env().unwrap_or_else(|_| StreamPrefetch::for_cpu()))
}

/// The family and model of an AMD x86-64 CPU (CPUID leaf 1, as AMD counts them).
fn amd_signature() -> Option<(u32, u32)> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaves 0 and 1 exist on every x86-64 CPU.
        let (vendor, sig) = (__cpuid(0), __cpuid(1));
        let mut name = [0u8; 12];
        name[..4].copy_from_slice(&vendor.ebx.to_le_bytes());
        name[4..8].copy_from_slice(&vendor.edx.to_le_bytes());
        name[8..].copy_from_slice(&vendor.ecx.to_le_bytes());
        if &name != b"AuthenticAMD" {
            return None;
        }
        Some(family_model(sig.eax))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

/// The family and model of a CPUID leaf 1 signature (EAX) by AMD's rule: where the base
/// family is 0Fh, the extended family is added to it and the extended model is the model's
/// high nibble (below 0Fh neither is used).
#[cfg_attr(not(any(test, target_arch = "x86_64")), allow(dead_code))]
fn family_model(eax: u32) -> (u32, u32) {
    let base = (eax >> 8) & 0xF;
    let model = (eax >> 4) & 0xF;
    if base == 0xF {
        (
            base + ((eax >> 20) & 0xFF),
            model | ((eax >> 16) & 0xF) << 4,
        )
    } else {
        (base, model)
    }
}

/// Zen 4 among family 19h's models (Genoa 10h-1Fh, Raphael and Phoenix 60h-7Fh, Bergamo and
/// Siena A0h-AFh); the others of the family are Zen 3.
#[cfg_attr(not(any(test, target_arch = "x86_64")), allow(dead_code))]
fn is_zen4(family: u32, model: u32) -> bool {
    family == 0x19 && matches!(model, 0x10..=0x1F | 0x60..=0x7F | 0xA0..=0xAF)
}

/// Asks for the `n` cache lines of `bytes` from `at` on (those that exist) to be fetched;
/// nothing on targets without a hint here.
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], at: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: prefetching reads nothing into the program and cannot fault; SSE is
            // part of the x86-64 baseline; the address is inside `bytes`.
            unsafe { _mm_prefetch::<{ _MM_HINT_T0 }>(std::ptr::from_ref(p).cast()) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            // SAFETY: `PRFM` is a hint: it reads nothing into the program and cannot fault;
            // it is in the AArch64 base ISA; the address is inside `bytes`.
            unsafe {
                std::arch::asm!(
                    "prfm pldl1keep, [{0}]",
                    in(reg) std::ptr::from_ref(p),
                    options(nostack, readonly, preserves_flags)
                )
            };
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = (bytes, at, n);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_name_and_unknown_ones_are_refused() {
        for p in [
            StreamPrefetch::Tuned,
            StreamPrefetch::Off,
            StreamPrefetch::L1,
            StreamPrefetch::L2,
        ] {
            assert_eq!(StreamPrefetch::parse(p.name()).unwrap(), p);
        }
        assert_eq!(
            StreamPrefetch::parse(" NONE ").unwrap(),
            StreamPrefetch::Off
        );
        assert_eq!(
            StreamPrefetch::parse("auto").unwrap(),
            StreamPrefetch::for_cpu()
        );
        let e = StreamPrefetch::parse("t0").unwrap_err();
        assert!(
            e.to_string().contains("\"t0\"") && e.to_string().contains("BITNET_PREFETCH"),
            "{e}"
        );
    }

    #[test]
    fn amd_signatures_decode_and_only_zen4_turns_prefetch_off() {
        // Zen 4 (EPYC 9004: 00A10F11), Zen 5 (EPYC 9005: 00B00F21), Zen 3 (EPYC 7003:
        // 00A00F11), Zen 2 (00830F10).
        assert_eq!(family_model(0x00A1_0F11), (0x19, 0x11));
        assert_eq!(family_model(0x00B0_0F21), (0x1A, 0x02));
        assert_eq!(family_model(0x00A0_0F11), (0x19, 0x01));
        assert_eq!(family_model(0x0083_0F10), (0x17, 0x31));
        // Below family 0Fh AMD's rule uses neither extended field.
        assert_eq!(family_model(0x0001_0661), (6, 6));
        assert!(is_zen4(0x19, 0x11) && is_zen4(0x19, 0x61) && is_zen4(0x19, 0xA0));
        assert!(!is_zen4(0x19, 0x01) && !is_zen4(0x19, 0x21) && !is_zen4(0x1A, 0x02));
    }
}
