// PLACEHOLDER: the scalar reference until the NEON kernel lands.
pub(crate) unsafe fn fwht(x: &mut [f32]) {
    crate::scalar::hadamard::fwht(x)
}
