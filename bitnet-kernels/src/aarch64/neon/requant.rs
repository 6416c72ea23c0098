// PLACEHOLDER: the scalar reference until the NEON kernel lands.
pub(crate) unsafe fn f16_q8_0(src: &[u8], out: &mut [u8]) {
    crate::scalar::requant::f16_q8_0(src, out)
}
