//! The models a server is started with, read from its flags: each `-m FILE` (the first is
//! the default), each `*.gguf` of `--models-dir`, every model named by its file stem, and
//! the other names (`--alias` for the default, `--model-alias STEM=NAME` for any). Names
//! that would be ambiguous are refused here, before anything is loaded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::super::args::Args;

/// One model as the command line gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub name: String,
    pub aliases: Vec<String>,
    pub path: PathBuf,
}

/// Every model the flags name, the default first, and whether requests are routed by name
/// (several models, or `--models-dir`); one model alone answers every request, whatever
/// `model` it names, as a single-model server always has.
#[derive(Debug)]
pub struct Catalog {
    pub models: Vec<ModelSpec>,
    pub routed: bool,
}

impl Catalog {
    pub fn from_args(args: &Args) -> Result<Catalog> {
        let mut paths: Vec<PathBuf> = args.model.clone();
        if let Some(dir) = &args.models_dir {
            let found = gguf_files(dir)?;
            if found.is_empty() && paths.is_empty() {
                bail!("--models-dir {}: no *.gguf file in it", dir.display());
            }
            paths.extend(found);
        }
        let routed = paths.len() > 1 || args.models_dir.is_some();
        Catalog::build(
            &dedup(paths),
            args.alias.as_deref(),
            &args.model_alias,
            routed,
        )
    }

    /// The catalog of `paths` (the default first) with the default's `alias` and
    /// `STEM=NAME` aliases.
    fn build(
        paths: &[PathBuf],
        alias: Option<&str>,
        model_alias: &[String],
        routed: bool,
    ) -> Result<Catalog> {
        let mut models: Vec<ModelSpec> = Vec::with_capacity(paths.len());
        for path in paths {
            let name = stem(path)?;
            if let Some(other) = models.iter().find(|m| m.name == name) {
                bail!(
                    "two models would be named {name:?}: {} and {} (a model is named by its \
                     file stem: rename one of the files)",
                    other.path.display(),
                    path.display()
                );
            }
            models.push(ModelSpec {
                name,
                aliases: Vec::new(),
                path: path.clone(),
            });
        }
        if let (Some(alias), Some(default)) = (alias, models.first_mut()) {
            if routed {
                default.aliases.push(alias.to_owned());
            } else {
                // One model: --alias is its name, as it always was.
                default.name = alias.to_owned();
            }
        }
        for pair in model_alias {
            let (stem, name) = pair
                .split_once('=')
                .filter(|(s, n)| !s.is_empty() && !n.is_empty())
                .with_context(|| {
                    format!("--model-alias {pair:?}: give STEM=NAME (e.g. ggml-model-i2_s=bitnet)")
                })?;
            let names: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
            let names = names.join(", ");
            let Some(model) = models.iter_mut().find(|m| m.name == stem) else {
                bail!("--model-alias {pair:?}: no model is named {stem:?} (the models: {names})");
            };
            model.aliases.push(name.to_owned());
        }
        check_unique(&models)?;
        Ok(Catalog { models, routed })
    }
}

/// Every name (names and aliases) stands for one model only.
fn check_unique(models: &[ModelSpec]) -> Result<()> {
    let mut owner: HashMap<&str, &str> = HashMap::new();
    for m in models {
        for name in std::iter::once(&m.name).chain(&m.aliases) {
            if name.trim().is_empty() {
                bail!("a model name may not be blank ({})", m.path.display());
            }
            if let Some(first) = owner.insert(name, &m.name) {
                if first == m.name {
                    bail!("the name {name:?} is given to the model {first:?} twice");
                }
                bail!(
                    "the name {name:?} would stand for two models, {first:?} and {:?}: give \
                     each alias to one model only",
                    m.name
                );
            }
        }
    }
    Ok(())
}

/// The `*.gguf` files of `dir`, by name (subdirectories are not read).
fn gguf_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let read = std::fs::read_dir(dir)
        .with_context(|| format!("--models-dir {}: cannot read it", dir.display()))?;
    let mut found = Vec::new();
    for item in read {
        let item = item.with_context(|| format!("reading --models-dir {}", dir.display()))?;
        let path = item.path();
        let is_gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if is_gguf && path.is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// `paths` with a file given twice (say `-m DIR/x.gguf --models-dir DIR`) kept once, where
/// it first came.
fn dedup(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for p in paths {
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if !seen.contains(&key) {
            seen.push(key);
            out.push(p);
        }
    }
    out
}

fn stem(path: &Path) -> Result<String> {
    match path.file_stem() {
        Some(s) if !s.is_empty() => Ok(s.to_string_lossy().into_owned()),
        _ => bail!("{}: cannot name a model after this path", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn models_are_named_by_stem_and_aliases_attach_to_them() {
        let c = Catalog::build(
            &paths(&["m/a.gguf", "n/b.gguf"]),
            Some("first"),
            &["b=second".to_owned()],
            true,
        )
        .unwrap();
        assert_eq!(c.models[0].name, "a");
        assert_eq!(c.models[0].aliases, ["first"]);
        assert_eq!(c.models[1].name, "b");
        assert_eq!(c.models[1].aliases, ["second"]);
    }

    #[test]
    fn one_model_is_named_by_its_alias_as_before() {
        let c = Catalog::build(&paths(&["m/a.gguf"]), Some("x"), &[], false).unwrap();
        assert_eq!(c.models[0].name, "x");
        assert!(c.models[0].aliases.is_empty());
    }

    #[test]
    fn ambiguous_names_are_refused() {
        let two = paths(&["m/a.gguf", "n/a.gguf"]);
        let e = Catalog::build(&two, None, &[], true).unwrap_err();
        assert!(
            e.to_string().contains("two models would be named \"a\""),
            "{e}"
        );
        let ab = paths(&["m/a.gguf", "m/b.gguf"]);
        let e = Catalog::build(&ab, None, &["a=b".to_owned()], true).unwrap_err();
        assert!(e.to_string().contains("two models"), "{e}");
        let e = Catalog::build(&ab, Some("z"), &["b=z".to_owned()], true).unwrap_err();
        assert!(e.to_string().contains("\"z\""), "{e}");
        let e = Catalog::build(&ab, None, &["c=z".to_owned()], true).unwrap_err();
        assert!(e.to_string().contains("no model is named \"c\""), "{e}");
        let e = Catalog::build(&ab, None, &["a".to_owned()], true).unwrap_err();
        assert!(e.to_string().contains("STEM=NAME"), "{e}");
    }
}
