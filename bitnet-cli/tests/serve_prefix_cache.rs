//! The prefix cache kept on disk (`--prefix-cache-dir`) and llama-server's slot files
//! (`--slot-save-path`, `/slots`): a prompt saved, the server killed and started again, the
//! next request reading only its new tokens (`timings.cache_n`) and answering what a cold
//! server answers; damaged and foreign files reported and skipped, never loaded.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::server::Server;
use common::{scratch, shipped_model};
use serde_json::{Value, json};

/// A prompt of about 150 tokens on the shipped model, and a follow-up that extends it.
fn prompts() -> (String, String) {
    let system = "ROMEO: But, soft! what light through yonder window breaks? It is the east, \
                  and Juliet is the sun. Arise, fair sun, and kill the envious moon, who is \
                  already sick and pale with grief, that thou her maid art far more fair than \
                  she: be not her maid, since she is envious; her vestal livery is but sick and \
                  green and none but fools do wear it; cast it off.";
    (system.to_owned(), format!("{system}\nJULIET: Ay me!"))
}

fn complete(s: &Server, prompt: &str) -> (String, Value) {
    let (status, body) = s.post(
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    (
        body["choices"][0]["text"].as_str().unwrap().to_owned(),
        body["timings"].clone(),
    )
}

fn bkv_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "bkv"));
    v
}

/// Waits (polling, at most a minute) until `dir` holds a saved prefix.
fn wait_for_file(dir: &Path) -> PathBuf {
    let t0 = Instant::now();
    loop {
        if let Some(f) = bkv_files(dir).into_iter().next() {
            return f;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no file in {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start(extra: &[&str]) -> (Server, common::server::Log) {
    Server::start_model(&shipped_model(), extra)
}

#[test]
fn a_saved_prefix_survives_a_kill_and_a_damaged_file_is_skipped() {
    let dir = scratch("serve-prefix-cache");
    let cache = dir.join("cache");
    let cache_arg = cache.to_str().unwrap();
    let (system, turn) = prompts();

    // What a server without any cache answers to the follow-up.
    let (cold, _) = start(&[]);
    let (want, cold_t) = complete(&cold, &turn);
    assert_eq!(cold_t["cache_n"], 0);
    drop(cold);

    let (first, _) = start(&["--prefix-cache-dir", cache_arg]);
    complete(&first, &system);
    let file = wait_for_file(&cache);
    // Killed: no shutdown, nothing written on the way out.
    first.signal("-KILL");
    drop(first);

    let (second, log) = start(&["--prefix-cache-dir", cache_arg]);
    assert!(
        log.text().contains("restored from 1 file"),
        "{}",
        log.text()
    );
    let (text, t) = complete(&second, &turn);
    let (n_cached, n_read) = (
        t["cache_n"].as_u64().unwrap(),
        t["prompt_n"].as_u64().unwrap(),
    );
    assert!(n_cached >= 100, "the saved prompt was reused: {t}");
    assert_eq!(
        n_cached + n_read,
        cold_t["prompt_n"].as_u64().unwrap(),
        "only the new tokens were read: {t} vs {cold_t}"
    );
    assert_eq!(text, want, "the same answer as a cold server");
    drop(second);

    // One byte damaged: reported, skipped, the server answers from a cold cache.
    for f in bkv_files(&cache) {
        let mut bytes = std::fs::read(&f).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&f, &bytes).unwrap();
    }
    let (third, log) = start(&["--prefix-cache-dir", cache_arg]);
    let text_log = log.text();
    assert!(
        text_log.contains("skipped")
            && text_log.contains("corrupt")
            && !text_log.contains("restored from"),
        "{text_log}"
    );
    let (text, t) = complete(&third, &turn);
    assert_eq!(
        t["cache_n"], 0,
        "nothing of the damaged file was loaded: {t}"
    );
    assert_eq!(text, want);
    drop(third);

    // Rows of other KV settings are refused by name, never loaded.
    std::fs::remove_dir_all(&cache).unwrap();
    let (q8, _) = start(&["--prefix-cache-dir", cache_arg, "-ctk", "q8_0"]);
    complete(&q8, &system);
    wait_for_file(&cache);
    drop(q8);
    let (f16, log) = start(&["--prefix-cache-dir", cache_arg]);
    assert!(
        log.text().contains("skipped") && log.text().contains("K q8_0"),
        "{}",
        log.text()
    );
    assert_eq!(complete(&f16, &turn).1["cache_n"], 0);
    drop(f16);
    let _ = file;
}

#[test]
fn a_slot_saved_to_a_file_comes_back_after_a_restart() {
    let dir = scratch("serve-slots");
    let slots = dir.join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let slots_arg = slots.to_str().unwrap();
    let (system, turn) = prompts();

    let (first, _) = start(&["--slot-save-path", slots_arg, "-np", "2"]);
    let (status, body) = first.post(
        "/v1/completions",
        &json!({"prompt": system, "max_tokens": 4, "temperature": 0, "id_slot": 1}),
    );
    assert_eq!(status, 200, "{body}");
    let (status, list) = first.get("/slots");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");
    assert!(list[1]["n_tokens"].as_u64().unwrap() > 100, "{list}");
    assert_eq!(list[0]["n_tokens"], 0, "{list}");
    let (status, saved) = first.post("/slots/1?action=save", &json!({"filename": "romeo.bin"}));
    assert_eq!(status, 200, "{saved}");
    let n_saved = saved["n_saved"].as_u64().unwrap();
    assert!(n_saved > 100, "{saved}");
    assert_eq!(
        saved["n_written"].as_u64().unwrap(),
        std::fs::metadata(slots.join("romeo.bin")).unwrap().len()
    );
    // Names that leave the folder, unknown actions and slots are refused.
    for (path, body) in [
        ("/slots/1?action=save", json!({"filename": "../x.bin"})),
        ("/slots/1?action=save", json!({"filename": ".hidden"})),
        ("/slots/1?action=save", json!({})),
        ("/slots/1?action=fly", json!({"filename": "a"})),
        ("/slots/9?action=save", json!({"filename": "a"})),
        (
            "/slots/1?action=restore",
            json!({"filename": "missing.bin"}),
        ),
    ] {
        let (status, err) = first.post(path, &body);
        assert_eq!(status, 400, "{path} {body}: {err}");
        assert!(err["error"]["message"].is_string(), "{err}");
    }
    drop(first);

    let (second, _) = start(&["--slot-save-path", slots_arg, "-np", "2"]);
    let (status, back) = second.post("/slots/0?action=restore", &json!({"filename": "romeo.bin"}));
    assert_eq!(status, 200, "{back}");
    assert_eq!(back["n_restored"].as_u64().unwrap(), n_saved, "{back}");
    let (_, t) = complete(&second, &turn);
    assert!(t["cache_n"].as_u64().unwrap() >= 100, "{t}");
    let (status, erased) = second.post("/slots/0?action=erase", &json!({}));
    assert_eq!(status, 200);
    // The follow-up took the slot holding its start, so the slot now holds it and more.
    assert!(erased["n_erased"].as_u64().unwrap() > n_saved, "{erased}");
    // A damaged file is refused whole.
    let mut bytes = std::fs::read(slots.join("romeo.bin")).unwrap();
    let at = bytes.len() - 20;
    bytes[at] ^= 1;
    std::fs::write(slots.join("bad.bin"), &bytes).unwrap();
    let (status, err) = second.post("/slots/0?action=restore", &json!({"filename": "bad.bin"}));
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("corrupt"),
        "{err}"
    );
    drop(second);

    // Without --slot-save-path, saving is not offered.
    let (plain, _) = start(&[]);
    let (status, err) = plain.post("/slots/0?action=save", &json!({"filename": "a.bin"}));
    assert_eq!(status, 501, "{err}");
}
