//! `bitnet._bitnet`, the native half of the `bitnet` Python package: a model and its engine
//! thread ([`model::NativeModel`]), a generation's text as an iterator
//! ([`completion::TokenStream`]), a grammar or schema compiled for a model
//! ([`structured::CompiledConstraint`]), and the package's exception ([`error::BitnetError`]). The
//! Python half (`bitnet/llama.py`) shapes what these return into llama-cpp-python's dicts.

mod chat;
mod completion;
mod embedding;
mod error;
mod metadata;
mod model;
mod options;
mod replies;
mod speculate;
mod structured;
mod tools;

use pyo3::prelude::*;

#[pymodule]
fn _bitnet(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<model::NativeModel>()?;
    m.add_class::<completion::TokenStream>()?;
    m.add_class::<structured::CompiledConstraint>()?;
    m.add_function(wrap_pyfunction!(structured::check_grammar, m)?)?;
    m.add("BitnetError", m.py().get_type::<error::BitnetError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
