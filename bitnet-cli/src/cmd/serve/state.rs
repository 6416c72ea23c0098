//! What the handlers share: the models served (`models/`), the server's settings
//! (`config.rs`), the connection figures, and whether it is shutting down. What one model's
//! engine publishes is in `loaded.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use serde_json::{Map, Value};

use super::config::Config;
use super::error::{ApiError, ApiResult};
use super::metrics::ConnectionFigures;
use super::models::{Models, Served};
use super::request::model_name;

#[derive(Debug)]
pub struct AppState {
    pub models: Arc<Models>,
    pub config: Config,
    /// The connection layer's figures (server-wide; each model has its own others).
    pub connections: Arc<ConnectionFigures>,
    pub shutting_down: AtomicBool,
}

impl AppState {
    pub fn new(models: Arc<Models>, config: Config) -> AppState {
        AppState {
            models,
            config,
            connections: Arc::default(),
            shutting_down: AtomicBool::new(false),
        }
    }

    /// 503 while the server is not serving: shutting down, or loading its default model
    /// at start (`/health` says the same).
    pub fn check_serving(&self) -> ApiResult<()> {
        if self.shutting_down.load(SeqCst) {
            return Err(ApiError::unavailable("the server is shutting down", None));
        }
        if !self.models.started() {
            return Err(ApiError::unavailable("Loading model", Some(1)));
        }
        Ok(())
    }

    /// The model a request names (`model`; none: the default), loaded: at once when it
    /// serves, else after its load, waiting for it with a place in the model's queue (see
    /// `models/`) and within `--timeout`.
    pub async fn route(&self, name: Option<&str>) -> ApiResult<Served> {
        self.check_serving()?;
        let entry = self.models.find(name)?;
        self.models.serve(&entry, &self.config).await
    }

    /// [`AppState::route`] for the model a request body names.
    pub async fn route_body(&self, body: &Map<String, Value>) -> ApiResult<Served> {
        self.route(model_name(body, self.models.routed())?).await
    }
}
