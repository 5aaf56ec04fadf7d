"""Rotate queries as vLLM's Llama layer does from an exported head's config.json; run with vLLM's interpreter:

    .venv-vllm/bin/python tests/engines/vllm_rope_probe.py SPEC.json OUT.json

``SPEC``: ``{"heads": {name: export_dir}, "positions": [p...], "query": [[...]] ([T, head_dim])}``. Each head's
config is read by vLLM's own ``get_config`` and its rotary embedding built by ``get_rope`` with the arguments
vLLM's ``LlamaAttention._init_rotary_emb`` passes (head_dim, max_position_embeddings, config.rope_parameters,
neox style); ``OUT`` gets ``{name: rotated [T, head_dim]}`` from ``forward_native`` (float32), or
``{name: {"error": ...}}``. A script, not a module of the package: it imports vLLM.
"""

import json
import sys


def rotate(export_dir: str, positions, query):
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.transformers_utils.config import get_config

    cfg = get_config(export_dir, trust_remote_code=False)
    with set_current_vllm_config(VllmConfig()):  # custom ops read the current config when built
        rope = get_rope(cfg.head_dim, max_position=cfg.max_position_embeddings,
                        rope_parameters=getattr(cfg, "rope_parameters", None), is_neox_style=True,
                        dtype=torch.float32)
        q = torch.tensor(query, dtype=torch.float32)
        out, _ = rope.forward_native(torch.tensor(positions), q.clone(), q.clone())
    return out.tolist()


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    result = {}
    for name, path in spec["heads"].items():
        try:
            result[name] = rotate(path, spec["positions"], spec["query"])
        except Exception as exc:  # reported per head; the test names the failing variant
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
