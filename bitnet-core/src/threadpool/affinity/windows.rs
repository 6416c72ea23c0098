//! The Windows side of [`super`]: a thread's processor-group affinity (read and put back
//! with `GetThreadGroupAffinity` / `SetThreadGroupAffinity`, which, unlike
//! `SetThreadAffinityMask`, read the mask without changing it) and the physical core of a
//! logical CPU (`GetLogicalProcessorInformationEx`, the counterpart of Linux sysfs).
//!
//! CPU ids are those of `core_affinity` on Windows: bits of the affinity mask in the
//! thread's own processor group (at most 64 logical CPUs). A process is placed in one group
//! unless it asks for more, so a pool pins within that group; a machine with more than 64
//! logical CPUs runs one pool per group at most on its CPUs.

use std::sync::OnceLock;

use windows_sys::Win32::System::SystemInformation::{
    GROUP_AFFINITY, GetLogicalProcessorInformationEx, PROCESSOR_RELATIONSHIP,
    RelationProcessorCore, SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX,
};
use windows_sys::Win32::System::Threading::{
    GetCurrentThread, GetThreadGroupAffinity, SetThreadGroupAffinity,
};

/// The calling thread's group and mask (`None` where Windows does not say).
pub(super) fn thread_group_affinity() -> Option<GROUP_AFFINITY> {
    let mut affinity = GROUP_AFFINITY::default();
    // SAFETY: the pseudo-handle of the calling thread is always valid; the out-pointer is a
    // live local of the type the function writes.
    let ok = unsafe { GetThreadGroupAffinity(GetCurrentThread(), &mut affinity) };
    (ok != 0).then_some(affinity)
}

/// Puts the calling thread back on `affinity`; returns whether Windows accepted it.
pub(super) fn set_thread_group_affinity(affinity: &GROUP_AFFINITY) -> bool {
    // SAFETY: as above; `affinity` is a valid GROUP_AFFINITY read by
    // `thread_group_affinity`, and the previous affinity is not asked for (null).
    unsafe { SetThreadGroupAffinity(GetCurrentThread(), affinity, std::ptr::null_mut()) != 0 }
}

/// The CPU ids (bits) of `affinity`'s mask.
pub(super) fn mask_cpus(affinity: &GROUP_AFFINITY) -> Vec<core_affinity::CoreId> {
    (0..usize::BITS as usize)
        .filter(|bit| affinity.Mask & (1usize << bit) != 0)
        .map(|id| core_affinity::CoreId { id })
        .collect()
}

/// `(group, core index)` of logical CPU `cpu` of the calling thread's group, `None` where
/// the topology cannot be read.
pub(super) fn physical_core_key(cpu: usize) -> Option<(u32, u32)> {
    let group = thread_group_affinity()?.Group;
    let bit = 1usize.checked_shl(u32::try_from(cpu).ok()?)?;
    let index = processor_cores()
        .iter()
        .position(|c| c.Group == group && c.Mask & bit != 0)?;
    Some((u32::from(group), u32::try_from(index).ok()?))
}

/// Every physical core of the machine, as the group and mask of its logical CPUs (read once).
fn processor_cores() -> &'static [GROUP_AFFINITY] {
    static CORES: OnceLock<Vec<GROUP_AFFINITY>> = OnceLock::new();
    CORES.get_or_init(read_processor_cores)
}

fn read_processor_cores() -> Vec<GROUP_AFFINITY> {
    let mut len = 0u32;
    // SAFETY: a null buffer with length 0 only asks for the size needed, written to `len`;
    // the call fails with ERROR_INSUFFICIENT_BUFFER, which is expected.
    unsafe {
        GetLogicalProcessorInformationEx(RelationProcessorCore, std::ptr::null_mut(), &mut len)
    };
    // u64 words: the records hold pointer-sized fields, so the buffer is 8-byte aligned.
    let mut buf = vec![0u64; (len as usize).div_ceil(8)];
    // SAFETY: `buf` is writable for at least `len` bytes, suitably aligned, and `len` says so.
    let ok = unsafe {
        GetLogicalProcessorInformationEx(RelationProcessorCore, buf.as_mut_ptr().cast(), &mut len)
    };
    if ok == 0 {
        return Vec::new();
    }
    let bytes: &[u8] = bytemuck::cast_slice(&buf);
    let bytes = &bytes[..(len as usize).min(bytes.len())];
    // A record: Relationship (i32), Size (u32), then a PROCESSOR_RELATIONSHIP whose
    // GroupMask holds one GROUP_AFFINITY for a core (a core never spans groups).
    let size_at = std::mem::offset_of!(SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX, Size);
    let mask_at = std::mem::offset_of!(SYSTEM_LOGICAL_PROCESSOR_INFORMATION_EX, Anonymous)
        + std::mem::offset_of!(PROCESSOR_RELATIONSHIP, GroupMask);
    let mask_len = std::mem::size_of::<GROUP_AFFINITY>();
    let mut cores = Vec::new();
    let mut at = 0usize;
    while let Some(record) = bytes.get(at..) {
        let Some(size) = record
            .get(size_at..size_at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
            .and_then(|s| usize::try_from(s).ok())
            .filter(|&s| s > 0 && s <= record.len())
        else {
            break;
        };
        if let Some(mask) = record[..size].get(mask_at..mask_at + mask_len) {
            // SAFETY: `mask` is `size_of::<GROUP_AFFINITY>()` bytes inside the record, and
            // GROUP_AFFINITY is plain integers, valid for any bit pattern; the read makes no
            // alignment assumption.
            cores.push(unsafe { std::ptr::read_unaligned(mask.as_ptr().cast::<GROUP_AFFINITY>()) });
        }
        at += size;
    }
    cores
}
