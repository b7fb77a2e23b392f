"""Issue 27 item 2: secrets are recognised by the shape of their value as well as by their name
(GITHUB_PAT, HF_AUTH, DATABASE_URL with a password, hf_/ghp_/sk- tokens, bearer values, passwords in
URLs), in argv, environments, free text and JSON documents such as a manifest's runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kldtui.redact import (
    REDACTED,
    SCAN_OVERLAP,
    chunks_look_secret,
    is_secret_env,
    looks_secret,
    redact_argv,
    redact_env,
    redact_json,
    redact_text,
)

HF = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3k"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
GH_FINE = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNO"
SK = "sk-proj-" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SECRETS = (HF, GHP, GH_FINE, SK, JWT, "hunter2pw", "s3cr3t-value-42")


@pytest.mark.parametrize("name", ["GITHUB_PAT", "HF_AUTH", "AUTHORIZATION", "AWS_SECRET_ACCESS_KEY",
                                  "DB_PASS", "SERVICE_CREDENTIALS", "my_api_key", "HF_TOKEN",
                                  "HUGGING_FACE_HUB_TOKEN", "SESSION_COOKIE"])
def test_secret_names(name: str) -> None:
    assert is_secret_env(name)


@pytest.mark.parametrize("name", ["PATH", "PWD", "CUDA_VISIBLE_DEVICES", "VLLM_TRITON_MLA_STATIC_KV_SPLITS",
                                  "OMP_NUM_THREADS", "PATCH_LEVEL", "AUTHOR", "HOME", "VLLM_HOST_IP"])
def test_not_secret_names(name: str) -> None:
    assert not is_secret_env(name)


@pytest.mark.parametrize("value", [HF, GHP, GH_FINE, SK, JWT, "Bearer abc.def-ghi_jkl",
                                   "postgres://app:hunter2pw@db.internal:5432/prod",
                                   "AKIAIOSFODNN7EXAMPLE", "xoxb-123456789012-abcdefghijkl",
                                   # one of each other shape: a shape is searched for only where one of
                                   # its literals is (redact._VALUE_PATTERNS), so each is tried here
                                   "bearer abcdefghijkl", "Basic dXNlcjpwYXNzd29yZA==",
                                   "basic dXNlcjpwYXNzd29yZA==",
                                   "api_org_" + "Ab1" * 8, "gho_" + "Zz9" * 11, "ghs_" + "Yy8" * 11,
                                   "ASIAIOSFODNN7EXAMPLE", "xoxp-1234-5678-abcdefgh",
                                   "mongodb+srv://abcd1234efgh@cluster0.example.net/db",
                                   "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE="])
def test_values_that_look_secret(value: str) -> None:
    assert looks_secret(value)
    assert not any(s in redact_text(f"x {value} y") for s in SECRETS if s in value)


@pytest.mark.parametrize("value", ["Qwen/Qwen3-8B", "/models/kimi-k3", "http://127.0.0.1:8000",
                                   "https://huggingface.co/datasets/x", "--max-num-seqs", "bf16",
                                   "sk-value", "hf_hub", "0.32.0", "fp8_e4m3"])
def test_values_that_do_not(value: str) -> None:
    assert not looks_secret(value) and redact_text(value) == value


def test_url_password_keeps_user_and_host() -> None:
    assert redact_text("postgres://app:hunter2pw@db:5432/x") == f"postgres://app:{REDACTED}@db:5432/x"
    assert redact_text("https://tok3nvalue@host/x") == f"https://{REDACTED}@host/x"


def test_env_by_name_and_by_value() -> None:
    env = {"GITHUB_PAT": "ghp-short-but-named", "DATABASE_URL": "postgres://app:hunter2pw@db/prod",
           "HF_AUTH": "anything", "SOME_VAR": HF, "NOTE": f"token {SK} inside", "CUDA_VISIBLE_DEVICES": "0,1"}
    out = redact_env(env)
    assert out["GITHUB_PAT"] == REDACTED and out["HF_AUTH"] == REDACTED and out["SOME_VAR"] == REDACTED
    assert out["DATABASE_URL"] == f"postgres://app:{REDACTED}@db/prod"
    assert out["NOTE"] == f"token {REDACTED} inside" and out["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_argv_by_flag_and_by_value() -> None:
    argv = ["vllm", "serve", "/m", "--api-key", "plainvalue", "--hub-url=https://u:hunter2pw@hub",
            GHP, "--header", f"Authorization: Bearer {JWT}", "--port", "8000"]
    out = redact_argv(argv)
    assert out[4] == REDACTED and out[5] == f"--hub-url=https://u:{REDACTED}@hub"
    assert out[6] == REDACTED and JWT not in " ".join(out) and out[-2:] == ["--port", "8000"]


def test_json_runtime_is_redacted_everywhere() -> None:
    runtime = {"env": {"GITHUB_PAT": "x" * 12, "DATABASE_URL": "mysql://root:s3cr3t-value-42@h/d"},
               "argv": ["vllm", "--api-key", "hunter2pw", "--model", "/m"],
               "notes": [f"fetched with {HF}"], "headers": {"Authorization": "Bearer abcdefghijkl"},
               "password": "hunter2pw", "nested": {"deeper": {"token": 12345678}}}
    out = redact_json(runtime)
    text = json.dumps(out)
    for secret in (*SECRETS, "x" * 12, "abcdefghijkl", "12345678"):
        assert secret not in text, secret
    assert out["argv"] == ["vllm", "--api-key", REDACTED, "--model", "/m"]
    assert out["env"]["DATABASE_URL"] == f"mysql://root:{REDACTED}@h/d"
    assert runtime["password"] == "hunter2pw"  # the input is not changed


def test_logits_and_scores_manifests_store_a_redacted_runtime(tmp_path: Path) -> None:
    import numpy as np

    from kldtui.formats.logits_writer import LogitsFileWriter, write_logits_manifest
    from kldtui.formats.suite_writer import write_suite

    suite = write_suite(tmp_path / "suite", [("prose", list(range(9)))])
    w = suite.windows[0]
    writer = LogitsFileWriter(tmp_path / "out", w, 4, suite.context_length)
    writer.write_rows(np.zeros((w.scored_positions, 4), np.float32))
    written = writer.commit()
    runtime = {"env": {"GITHUB_PAT": GHP, "HF_AUTH": "abc12345"}, "argv": ["--token", HF],
               "db": "postgres://u:hunter2pw@h/x"}
    path = write_logits_manifest(tmp_path / "out", suite, [written], kind="candidate",
                                 runtime=runtime)
    text = path.read_text()
    for secret in (GHP, "abc12345", HF, "hunter2pw"):
        assert secret not in text
    assert "GITHUB_PAT" in text and REDACTED in text


# -- a file read in parts (publish's scan of a large file: kldtui/stages/publish_secrets.py) ---------
def _parts(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("secret", [HF, GHP, SK, JWT, "postgres://app:hunter2pw@db/x",
                                    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA"])
def test_a_secret_split_by_any_part_s_end_is_found(secret: str) -> None:
    """However the parts cut the secret (one byte of it in a part, or the whole but its last), it is
    found, as in the text whole; and text without it is not taken for one."""
    head, tail = b"lorem ipsum dolor sit amet\n" * 400, b"\nconsectetur adipiscing elit" * 400
    raw = secret.encode()
    for cut in range(len(raw) + 1):
        parts = [head + raw[:cut], raw[cut:] + tail]
        assert chunks_look_secret(parts), (secret, cut)
    assert chunks_look_secret(_parts(head + raw + tail, 5))  # parts shorter than the secret
    assert not chunks_look_secret(_parts(head + tail, 1000))


def test_a_secret_far_from_the_start_or_among_bytes_that_are_not_text_is_found() -> None:
    filler = b"x = 1\n" * (SCAN_OVERLAP // 2)  # more than the overlap each part carries on
    assert chunks_look_secret(_parts(filler * 8 + HF.encode() + filler, 4096))
    # bytes that are not UTF-8 (a binary file, a Latin-1 log): the text around them is still read
    assert chunks_look_secret([b"\xff\xfe\x00" * 100 + b"token " + HF.encode() + b"\x00\xc3"])
    # a character of two bytes cut by a part's end neither hides the secret nor is taken for one
    e_acute = "\u00e9".encode()
    assert chunks_look_secret([b"caf" + e_acute[:1], e_acute[1:] + b" " + GHP.encode()])
    assert not chunks_look_secret([b"caf" + e_acute[:1], e_acute[1:] + b" au lait"])
