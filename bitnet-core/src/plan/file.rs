//! A plan as a small JSON file (what `bitnet calibrate -o` writes and `--plan` reads), and
//! the same text as a GGUF metadata string (`bitnet-convert --calibration`):
//!
//! ```json
//! {"format": "bitnet-precision-plan", "version": 1, "kv_rotate": "auto",
//!  "layers": [{"k": "q8_0", "v": "q4_0", "acts": "int8"}, ...],
//!  "calibration": {"model": "m.gguf", "budget_kld": 0.002, "measured_kld": 0.0017,
//!                  "tokens": 4080}}
//! ```
//!
//! Names are the command line's (`-ctk`'s types, `--kv-rotate`'s sides). Unknown fields are
//! refused, so a misspelt one is not silently ignored.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{ActPrecision, LayerPlan, PlanError, PrecisionPlan, Provenance};
use crate::kv::{KvRotate, KvType};

/// The `format` field of a plan.
pub const PLAN_FORMAT: &str = "bitnet-precision-plan";
/// The version this build writes and reads.
pub const PLAN_VERSION: u32 = 1;
/// The GGUF metadata key a converted file keeps its plan under (the JSON text).
pub const PLAN_METADATA_KEY: &str = "bitnet.precision_plan";

/// The longest plan file read (a plan of thousands of layers is a few hundred KiB).
const MAX_PLAN_BYTES: u64 = 4 << 20;
/// The most layers a plan may list.
const MAX_LAYERS: usize = 1 << 16;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanJson {
    format: String,
    version: u32,
    kv_rotate: String,
    layers: Vec<LayerJson>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    calibration: Option<ProvenanceJson>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerJson {
    k: String,
    v: String,
    acts: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvenanceJson {
    model: String,
    budget_kld: f64,
    measured_kld: f64,
    tokens: usize,
}

impl PrecisionPlan {
    /// The plan as JSON text (one layer a line, so a diff of two plans reads).
    pub fn to_json(&self) -> String {
        let head = PlanJson {
            format: PLAN_FORMAT.to_owned(),
            version: PLAN_VERSION,
            kv_rotate: self.kv_rotate.name().to_owned(),
            layers: Vec::new(),
            calibration: self.provenance.as_ref().map(|p| ProvenanceJson {
                model: p.model.clone(),
                budget_kld: p.budget_kld,
                measured_kld: p.measured_kld,
                tokens: p.tokens,
            }),
        };
        let layer = |l: &LayerPlan| {
            serde_json::to_string(&LayerJson {
                k: l.k.name().to_owned(),
                v: l.v.name().to_owned(),
                acts: l.acts.name().to_owned(),
            })
            .expect("plain strings serialize")
        };
        let mut out = String::from("{\n");
        out += &format!("  \"format\": {:?},\n", head.format);
        out += &format!("  \"version\": {},\n", head.version);
        out += &format!("  \"kv_rotate\": {:?},\n", head.kv_rotate);
        if let Some(c) = &head.calibration {
            out += &format!(
                "  \"calibration\": {},\n",
                serde_json::to_string(c).expect("plain values serialize")
            );
        }
        out += "  \"layers\": [\n";
        let rows: Vec<String> = self
            .layers
            .iter()
            .map(|l| format!("    {}", layer(l)))
            .collect();
        out += &rows.join(",\n");
        out += "\n  ]\n}\n";
        out
    }

    /// Reads a plan from JSON text.
    pub fn from_json(text: &str) -> Result<PrecisionPlan, PlanError> {
        let j: PlanJson =
            serde_json::from_str(text).map_err(|e| PlanError::Parse(e.to_string()))?;
        if j.format != PLAN_FORMAT {
            return Err(PlanError::Parse(format!(
                "format {:?}, expected {PLAN_FORMAT:?}",
                j.format
            )));
        }
        if j.version != PLAN_VERSION {
            return Err(PlanError::Version {
                found: j.version,
                supported: PLAN_VERSION,
            });
        }
        if j.layers.is_empty() || j.layers.len() > MAX_LAYERS {
            return Err(PlanError::Parse(format!(
                "{} layers (1 to {MAX_LAYERS})",
                j.layers.len()
            )));
        }
        let kv_rotate = KvRotate::parse(&j.kv_rotate).ok_or_else(|| {
            PlanError::Parse(format!(
                "unknown kv_rotate {:?} (one of {})",
                j.kv_rotate,
                names(KvRotate::ALL.iter().map(|r| r.name()))
            ))
        })?;
        let layers = j
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let kv = |field, v: &str| {
                    KvType::parse(v).ok_or_else(|| PlanError::UnknownValue {
                        layer: i,
                        field,
                        value: v.to_owned(),
                        allowed: names(KvType::ALL.iter().map(|t| t.name())),
                    })
                };
                Ok(LayerPlan {
                    k: kv("k", &l.k)?,
                    v: kv("v", &l.v)?,
                    acts: ActPrecision::parse(&l.acts).ok_or_else(|| PlanError::UnknownValue {
                        layer: i,
                        field: "acts",
                        value: l.acts.clone(),
                        allowed: names(ActPrecision::ALL.iter().map(|a| a.name())),
                    })?,
                })
            })
            .collect::<Result<Vec<_>, PlanError>>()?;
        let provenance = j.calibration.map(|c| Provenance {
            model: c.model,
            budget_kld: c.budget_kld,
            measured_kld: c.measured_kld,
            tokens: c.tokens,
        });
        Ok(PrecisionPlan {
            layers,
            kv_rotate,
            provenance,
        })
    }

    /// Reads a plan file, or the plan a GGUF file keeps under [`PLAN_METADATA_KEY`]
    /// (`bitnet-convert --calibration PLAN` writes it; `--plan MODEL.gguf` reads it back).
    pub fn read(path: &Path) -> Result<PrecisionPlan, PlanError> {
        use std::io::Read;
        let io = |source| PlanError::Io {
            path: path.to_owned(),
            source,
        };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_PLAN_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        if bytes.starts_with(&bitnet_gguf::MAGIC) {
            return Self::from_gguf(path);
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| PlanError::Parse(format!("{}: not UTF-8 text", path.display())))?;
        if text.len() as u64 > MAX_PLAN_BYTES {
            return Err(PlanError::Parse(format!(
                "{}: longer than {MAX_PLAN_BYTES} bytes",
                path.display()
            )));
        }
        Self::from_json(&text)
    }

    /// The plan kept in the metadata of the GGUF file at `path`.
    pub fn from_gguf(path: &Path) -> Result<PrecisionPlan, PlanError> {
        let file = bitnet_gguf::GgufFile::open(path, bitnet_gguf::LoadMode::Mmap)
            .map_err(|e| PlanError::Parse(format!("{}: {e}", path.display())))?;
        match file
            .metadata()
            .get(PLAN_METADATA_KEY)
            .and_then(|v| v.as_str())
        {
            Some(text) => Self::from_json(text),
            None => Err(PlanError::Parse(format!(
                "{} keeps no plan ({PLAN_METADATA_KEY}; `bitnet-convert --calibration PLAN` \
                 writes one)",
                path.display()
            ))),
        }
    }

    /// Writes the plan to `path` (through a temporary file beside it, then renamed, so a
    /// reader never sees half a plan).
    pub fn write(&self, path: &Path) -> Result<(), PlanError> {
        let io = |source| PlanError::Io {
            path: path.to_owned(),
            source,
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        std::fs::write(&tmp, self.to_json()).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> PrecisionPlan {
        PrecisionPlan {
            layers: vec![
                LayerPlan {
                    k: KvType::Q8_0,
                    v: KvType::Q4_0,
                    acts: ActPrecision::Int8,
                },
                LayerPlan {
                    k: KvType::B1,
                    v: KvType::Fp8,
                    acts: ActPrecision::Int4,
                },
            ],
            kv_rotate: KvRotate::Auto,
            provenance: Some(Provenance {
                model: "shakespeare.gguf".into(),
                budget_kld: 0.002,
                measured_kld: 0.00175,
                tokens: 4080,
            }),
        }
    }

    #[test]
    fn json_round_trips() {
        let text = plan().to_json();
        assert_eq!(PrecisionPlan::from_json(&text).unwrap(), plan());
        let mut bare = plan();
        bare.provenance = None;
        assert_eq!(PrecisionPlan::from_json(&bare.to_json()).unwrap(), bare);
    }

    #[test]
    fn file_round_trips() {
        let dir = std::env::temp_dir().join(format!("bitnet-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.json");
        plan().write(&path).unwrap();
        assert_eq!(PrecisionPlan::read(&path).unwrap(), plan());
        let missing = PrecisionPlan::read(&dir.join("none.json")).unwrap_err();
        assert!(matches!(missing, PlanError::Io { .. }), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_plans_are_typed_errors() {
        let good = plan().to_json();
        let cases: [(String, &str); 7] = [
            ("{".into(), "not a precision plan"),
            (good.replace("bitnet-precision-plan", "other"), "format"),
            (
                good.replace("\"version\": 1", "\"version\": 9"),
                "version 9",
            ),
            (
                good.replace("\"q4_0\"", "\"q3\""),
                "layer 0: unknown v \"q3\"",
            ),
            (
                good.replace("\"int4\"", "\"int2\""),
                "layer 1: unknown acts",
            ),
            (good.replace("\"auto\"", "\"sideways\""), "kv_rotate"),
            (
                good.replace("\"acts\": \"int8\"", "\"acts\": \"int8\", \"x\": 1")
                    .replace("\"acts\":\"int8\"", "\"acts\":\"int8\",\"x\":1"),
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            let err = PrecisionPlan::from_json(&text).unwrap_err().to_string();
            assert!(err.contains(want), "{err:?} should say {want:?}");
        }
        let empty = good.replace(&good[good.find("\"layers\"").unwrap()..], "\"layers\": []}");
        let err = PrecisionPlan::from_json(&empty).unwrap_err().to_string();
        assert!(err.contains("0 layers"), "{err}");
    }
}
