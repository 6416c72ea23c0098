//! bitnet-core: the model runtime (being written).
