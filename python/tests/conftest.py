"""Shared fixtures: the shipped model, loaded once per test session (the engine thread is
shared by the tests, as it would be by an application's threads), and the CLI that gives
the reference text."""

import os
import pathlib
import shutil

import pytest

import bitnet

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "shakespeare.gguf"


@pytest.fixture(scope="session")
def llm():
    model = bitnet.Llama(str(MODEL), verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="session")
def embedder():
    model = bitnet.Llama(str(MODEL), embedding=True, verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="session")
def bitnet_cli():
    """The `bitnet` binary: $BITNET_BIN, else the workspace's release or debug build."""
    candidates = [os.environ.get("BITNET_BIN"), REPO / "target/release/bitnet", REPO / "target/debug/bitnet"]
    for c in candidates:
        if c and pathlib.Path(c).is_file():
            return str(c)
    found = shutil.which("bitnet")
    if found:
        return found
    pytest.fail("no bitnet binary: build it (cargo build --release -p bitnet-cli) or set BITNET_BIN")
