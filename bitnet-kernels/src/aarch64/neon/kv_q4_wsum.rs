// PLACEHOLDER: the scalar reference until the NEON kernel lands.
