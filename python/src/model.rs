//! `bitnet._bitnet.Model`: a loaded model and its engine thread, what the Python `Llama`
//! wraps. Loading and every wait run with the interpreter lock released; the engine thread
//! (`bitnet_core::runtime`) owns the scheduler, so calls from several Python threads are
//! decoded together rather than one after the other.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bitnet_core::chat::{ChatTemplate, ToolFormat, parse_tool_calls, tool_call_constraint};
use bitnet_core::constrain::ConstraintSpec;
use bitnet_core::runtime::{Handle, Runtime, RuntimeOptions};
use bitnet_core::scheduler::SpecParams;
use bitnet_core::tokenizer::Tokenizer;
use bitnet_core::{CoreError, Engine, Model, Scheduler, SchedulerOptions};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::completion::{Sampling, TokenStream};
use crate::error::{engine_error, message_chain, refused};
use crate::options::ModelSettings;
use crate::speculate::SpecSettings;
use crate::structured::{self, CompiledConstraint};
use crate::{chat, completion, embedding, metadata, tools};

/// A model file loaded, with the engine that runs it on a thread of its own.
#[pyclass(module = "bitnet._bitnet", name = "Model", frozen)]
#[derive(Debug)]
pub struct NativeModel {
    model: Arc<Model>,
    path: PathBuf,
    handle: Handle,
    /// `None` once closed.
    runtime: Mutex<Option<Runtime>>,
    n_ctx: usize,
    chat_format: Option<String>,
    /// Resolved on the first chat: a model whose own template does not parse still
    /// completes and embeds.
    template: OnceLock<Result<ChatTemplate, String>>,
    pooling: Option<String>,
    metadata: Vec<(String, String)>,
    /// Every generation's speculation (the constructor's draft settings).
    speculate: Option<SpecParams>,
}

impl NativeModel {
    fn tokenizer(&self) -> &Tokenizer {
        // Checked at load: a model without a tokenizer is refused.
        self.model
            .tokenizer()
            .expect("the tokenizer was checked at load")
    }

    fn template(&self) -> PyResult<&ChatTemplate> {
        self.template
            .get_or_init(|| {
                chat::template(&self.model, self.chat_format.as_deref()).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| refused(e.clone()))
    }
}

/// Makes the engine (and the draft model's, if any) on the runtime's thread (its pool pins
/// it there) and says how that went on `ready`: the context of a sequence, or the error's
/// message.
fn start_runtime(
    model: Arc<Model>,
    draft: Option<Arc<Model>>,
    settings: bitnet_core::EngineOptions,
    parallel: usize,
    step_delay: Duration,
) -> PyResult<(Runtime, mpsc::Receiver<Result<usize, String>>)> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let options = RuntimeOptions {
        step_delay,
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::spawn(options, move || {
        let built = build_scheduler(model, draft, &settings, parallel);
        let _ = ready_tx.send(match &built {
            Ok((_, n_ctx)) => Ok(*n_ctx),
            Err(e) => Err(message_chain(e)),
        });
        built.map(|(sched, _)| sched)
    })
    .map_err(|e| engine_error("starting the engine thread", &e))?;
    Ok((runtime, ready_rx))
}

/// The scheduler over `model`'s engine, with the draft model's engine set on it, and the
/// context of a sequence.
fn build_scheduler(
    model: Arc<Model>,
    draft: Option<Arc<Model>>,
    settings: &bitnet_core::EngineOptions,
    parallel: usize,
) -> Result<(Scheduler, usize), CoreError> {
    let engine = Engine::new(model, settings)?;
    let n_ctx = engine.max_seq_len();
    let mut sched = Scheduler::new(
        engine,
        SchedulerOptions {
            max_running: parallel,
        },
    );
    if let Some(draft) = draft {
        sched.set_draft(Engine::new(draft, settings)?)?;
    }
    Ok((sched, n_ctx))
}

#[pymethods]
impl NativeModel {
    #[new]
    #[pyo3(signature = (
        path, *, n_ctx = 0, n_threads = 0, n_batch = 256, kernel = None, head = "auto",
        cache_type_k = "f16", cache_type_v = "f16", use_mmap = true, use_mlock = false,
        pin_threads = false, parallel = 64, chat_format = None, pooling = None,
        draft_model = None, lookup_ngram = None, draft_max = bitnet_core::scheduler::speculate::DEFAULT_DRAFT_MAX,
        draft_min = 0, draft_p_min = bitnet_core::scheduler::speculate::DEFAULT_P_MIN,
        draft_fixed = false, step_delay_ms = 0,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        n_ctx: usize,
        n_threads: usize,
        n_batch: usize,
        kernel: Option<&str>,
        head: &str,
        cache_type_k: &str,
        cache_type_v: &str,
        use_mmap: bool,
        use_mlock: bool,
        pin_threads: bool,
        parallel: usize,
        chat_format: Option<String>,
        pooling: Option<String>,
        draft_model: Option<PathBuf>,
        lookup_ngram: Option<usize>,
        draft_max: usize,
        draft_min: usize,
        draft_p_min: f32,
        draft_fixed: bool,
        step_delay_ms: u64,
    ) -> PyResult<Self> {
        let settings = ModelSettings {
            n_ctx,
            n_threads,
            n_batch,
            kernel,
            head,
            cache_type_k,
            cache_type_v,
            use_mmap,
            use_mlock,
            pin_threads,
        };
        let load = settings.load_options()?;
        let engine_options = settings.engine_options()?;
        if parallel == 0 {
            return Err(refused("parallel must be at least 1"));
        }
        let spec = SpecSettings {
            draft_model,
            lookup_ngram,
            draft_max,
            draft_min,
            draft_p_min,
            draft_fixed,
        };
        let speculate = spec.params(engine_options.batch)?;
        let loaded = py.detach(|| Model::load(&path, &load));
        let model =
            Arc::new(loaded.map_err(|e| engine_error(&format!("loading {}", path.display()), &e))?);
        let draft = match &spec.draft_model {
            None => None,
            Some(draft_path) => {
                let loaded = py.detach(|| Model::load(draft_path, &load));
                Some(Arc::new(loaded.map_err(|e| {
                    engine_error(
                        &format!("loading the draft model {}", draft_path.display()),
                        &e,
                    )
                })?))
            }
        };
        if model.tokenizer().is_none() {
            return Err(refused(format!(
                "{}: the model file has no tokenizer (tokenizer.ggml.* keys)",
                path.display()
            )));
        }
        if let Some(name) = &pooling {
            embedding::pooling(Some(name), model.config())?;
        }
        let metadata = metadata::read(&path)?;
        let (runtime, ready) = start_runtime(
            model.clone(),
            draft,
            engine_options,
            parallel,
            // Tests make the tiny model as slow as a big one, to interrupt it mid-answer.
            Duration::from_millis(step_delay_ms),
        )?;
        let n_ctx = py
            .detach(move || ready.recv())
            .map_err(|_| refused("creating the engine: the engine thread ended"))?
            .map_err(|m| refused(format!("creating the engine: {m}")))?;
        Ok(NativeModel {
            model,
            path,
            handle: runtime.handle(),
            runtime: Mutex::new(Some(runtime)),
            n_ctx,
            chat_format,
            template: OnceLock::new(),
            pooling,
            metadata,
            speculate,
        })
    }

    /// The model file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Positions one sequence holds (prompt and answer together).
    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn n_vocab(&self) -> usize {
        self.tokenizer().n_vocab()
    }

    fn n_embd(&self) -> usize {
        self.model.config().n_embd
    }

    fn token_bos(&self) -> Option<u32> {
        self.tokenizer().bos_id()
    }

    fn token_eos(&self) -> Option<u32> {
        self.tokenizer().eos_id()
    }

    /// The kernel set the weights were repacked for (`avx2`, `scalar`, ...).
    fn kernel(&self) -> &'static str {
        self.model.isa().name()
    }

    /// The file's scalar and string metadata, values as text (llama.cpp's
    /// `llama_model_meta_val_str`; arrays are left out as llama.cpp leaves them).
    fn metadata(&self) -> Vec<(String, String)> {
        self.metadata.clone()
    }

    /// Token ids of `text` (UTF-8 bytes). `add_bos`: add BOS (and EOS) as the vocabulary
    /// asks; `special`: recognise control tokens written in the text.
    #[pyo3(signature = (text, add_bos = true, special = false))]
    fn tokenize(&self, text: &[u8], add_bos: bool, special: bool) -> PyResult<Vec<u32>> {
        let text = std::str::from_utf8(text)
            .map_err(|e| refused(format!("tokenize: the text is not UTF-8: {e}")))?;
        Ok(self.tokenizer().encode(text, add_bos, special))
    }

    /// The bytes `tokens` stand for, joined. Control tokens render as nothing unless
    /// `special`.
    #[pyo3(signature = (tokens, special = false))]
    fn detokenize<'py>(
        &self,
        py: Python<'py>,
        tokens: Vec<u32>,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let tok = self.tokenizer();
        let mut bytes = Vec::new();
        for id in tokens {
            if id as usize >= tok.n_vocab() {
                return Err(refused(format!(
                    "detokenize: token {id} is outside the vocabulary ({} tokens)",
                    tok.n_vocab()
                )));
            }
            bytes.extend_from_slice(tok.token_to_piece_special(id, special));
        }
        Ok(PyBytes::new(py, &bytes))
    }

    /// Starts a generation: its text as an iterator (see `TokenStream`).
    #[pyo3(signature = (
        prompt, *, max_tokens, temperature, top_p, top_k, min_p, repeat_penalty,
        frequency_penalty, presence_penalty, seed, stop, logit_bias = None, heal = String::new(),
        logprobs = None, constraint = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn generate(
        &self,
        prompt: Vec<u32>,
        max_tokens: Option<usize>,
        temperature: f32,
        top_p: f32,
        top_k: usize,
        min_p: f32,
        repeat_penalty: f32,
        frequency_penalty: f32,
        presence_penalty: f32,
        seed: u64,
        stop: Vec<String>,
        logit_bias: Option<Vec<(u32, f32)>>,
        heal: String,
        logprobs: Option<usize>,
        constraint: Option<PyRef<'_, CompiledConstraint>>,
    ) -> PyResult<TokenStream> {
        let n_vocab = self.tokenizer().n_vocab();
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= n_vocab) {
            return Err(refused(format!(
                "prompt token {id} is outside the vocabulary ({n_vocab} tokens)"
            )));
        }
        let sampling = Sampling {
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            repeat_penalty,
            frequency_penalty,
            presence_penalty,
            seed,
            stop,
            logit_bias: logit_bias.unwrap_or_default(),
            constraint: constraint.map(|c| c.inner.clone()),
            speculate: self.speculate.clone(),
        };
        completion::start(
            &self.handle,
            self.model.clone(),
            prompt,
            sampling,
            heal,
            logprobs,
        )
    }

    /// A grammar (GBNF, or Lark after `%llguidance`) compiled for this model.
    fn compile_grammar(&self, text: &str) -> PyResult<CompiledConstraint> {
        structured::check_grammar(text)?;
        structured::compile(&self.model, &ConstraintSpec::grammar(text), "grammar")
    }

    /// A JSON Schema (as JSON text) compiled for this model.
    fn compile_json_schema(&self, schema_json: &str) -> PyResult<CompiledConstraint> {
        let spec = structured::json_schema(schema_json)?;
        structured::compile(&self.model, &spec, "JSON schema")
    }

    /// A conversation (OpenAI's messages as JSON) as the prompt of its next reply, with
    /// the call's tools (OpenAI's `tools` and `tool_choice` as JSON): the tokens, the text
    /// the reply's first token must begin with, the template's stop strings, the grammar a
    /// required or named call (or a template's generic JSON answer) follows, and whether the
    /// reply is to be read for calls (`parse_tool_calls`). `constrained`: the caller
    /// constrains the reply itself (a response format), which a tool grammar may not join.
    #[pyo3(signature = (
        messages_json, tools_json = "null", tool_choice_json = "null",
        parallel_tool_calls = true, constrained = false,
    ))]
    #[allow(clippy::type_complexity)]
    fn chat_prompt(
        &self,
        messages_json: &str,
        tools_json: &str,
        tool_choice_json: &str,
        parallel_tool_calls: bool,
        constrained: bool,
    ) -> PyResult<(
        Vec<u32>,
        String,
        Vec<String>,
        Option<CompiledConstraint>,
        bool,
    )> {
        let template = self.template()?;
        let request = tools::read(tools_json, tool_choice_json, parallel_tool_calls)?;
        let mut tool_constraint = None;
        if request.active() {
            let spec = tool_call_constraint(
                ToolFormat::detect(template),
                &request.tools,
                &request.choice,
                request.parallel,
                Some(self.tokenizer()),
            )
            .map_err(|e| refused(format!("tool_choice: {e}")))?;
            if let Some(spec) = spec {
                if constrained {
                    return Err(refused(
                        "a tool call and a response format cannot both constrain the answer: \
                         give one, or tool_choice=\"none\"",
                    ));
                }
                tool_constraint = Some(structured::compile(&self.model, &spec, "tools")?);
            }
        }
        let p = chat::prompt(
            &self.model,
            template,
            messages_json,
            &request.tools,
            constrained || tool_constraint.is_some(),
        )?;
        Ok((p.tokens, p.heal, p.stop, tool_constraint, request.active()))
    }

    /// A reply split into its text and its tool calls, in the syntax the chat template
    /// writes them in: the text outside the calls, and the calls as OpenAI's JSON list
    /// (`[{"id", "type": "function", "function": {"name", "arguments"}}]`).
    fn parse_tool_calls(&self, text: &str) -> PyResult<(String, String)> {
        let parsed = parse_tool_calls(ToolFormat::detect(self.template()?), text);
        let calls = serde_json::to_string(&parsed.tool_calls)
            .map_err(|e| refused(format!("writing the tool calls: {e}")))?;
        Ok((parsed.content, calls))
    }

    /// The name of the chat template chats are rendered with.
    fn chat_template_name(&self) -> PyResult<String> {
        Ok(self.template()?.name().to_owned())
    }

    /// The pooling embeddings get: `pooling=` if given, else the file's `pooling_type`, else
    /// `last` (`none` gives a vector a token).
    #[getter]
    fn pooling(&self) -> PyResult<&'static str> {
        Ok(embedding::pooling(self.pooling.as_deref(), self.model.config())?.name())
    }

    /// The vectors of each input's tokens (see `embedding::embed`).
    #[pyo3(signature = (inputs, normalize = 2))]
    fn embed(
        &self,
        py: Python<'_>,
        inputs: Vec<Vec<u32>>,
        normalize: i32,
    ) -> PyResult<Vec<Vec<Vec<f32>>>> {
        let pooling = embedding::pooling(self.pooling.as_deref(), self.model.config())?;
        embedding::embed(py, &self.handle, inputs, pooling, normalize)
    }

    /// Cancels what runs and ends the engine thread; later calls raise.
    fn close(&self, py: Python<'_>) {
        let runtime = self.runtime.lock().ok().and_then(|mut r| r.take());
        if let Some(runtime) = runtime {
            // The engine's error, if it failed to start, was raised by the constructor.
            let _ = py.detach(|| runtime.shutdown());
        }
    }
}
