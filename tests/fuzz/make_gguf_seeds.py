#!/usr/bin/env python3
"""Writes small GGUF v3 seed files into tests/fuzz/gguf/ (run once; the output is committed).

Seeds: a vocabulary-only file (SentencePiece-style, with scores and token types), a BPE
vocabulary with merges, a tiny Llama model (1 layer, dim 8, vocab 260: every tensor present)
in F32 and with a Q8_0 matrix, and a file exercising every metadata type, nested arrays and
general.alignment.
"""
import struct
import sys
from pathlib import Path

T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)


def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack('<Q', len(b)) + b


def scalar(t, v):
    fmt = {T_U8: 'B', T_I8: 'b', T_U16: 'H', T_I16: 'h', T_U32: 'I', T_I32: 'i', T_F32: 'f',
           T_BOOL: '?', T_U64: 'Q', T_I64: 'q', T_F64: 'd'}
    if t == T_STR:
        return s(v)
    return struct.pack('<' + fmt[t], v)


def value(t, v):
    if t == T_ARR:
        et, items = v
        out = struct.pack('<IQ', et, len(items))
        for it in items:
            out += value(et, it) if et == T_ARR else scalar(et, it)
        return out
    return scalar(t, v)


def gguf(kvs, tensors, alignment=32):
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack('<I', t) + value(t, v)
    offset = 0
    datas = []
    for name, ggml_type, dims, data in tensors:
        out += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', ggml_type, offset)
        datas.append((offset, data))
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b'\0' * ((-len(out)) % alignment)
    body = bytearray(offset)
    for off, data in datas:
        body[off:off + len(data)] = data
    return out + bytes(body)


def spm_vocab(n=260):
    tokens = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)]
    tokens += ['\u2581the', 'a', 'b'][: max(0, n - len(tokens))]
    tokens = tokens[:n]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    return [
        ('tokenizer.ggml.model', T_STR, 'llama'),
        ('tokenizer.ggml.tokens', T_ARR, (T_STR, tokens)),
        ('tokenizer.ggml.scores', T_ARR, (T_F32, [float(-i) for i in range(len(tokens))])),
        ('tokenizer.ggml.token_type', T_ARR, (T_I32, types)),
        ('tokenizer.ggml.bos_token_id', T_U32, 1),
        ('tokenizer.ggml.eos_token_id', T_U32, 2),
        ('tokenizer.ggml.unknown_token_id', T_U32, 0),
        ('tokenizer.ggml.add_bos_token', T_BOOL, True),
        ('tokenizer.chat_template', T_STR, "{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}"),
    ], len(tokens)


def f32(n, scale=0.01):
    return struct.pack('<%df' % n, *[scale * ((i * 37) % 17 - 8) for i in range(n)])


def q8_0(rows, cols):
    out = b''
    for _ in range(rows * cols // 32):
        out += struct.pack('<e', 0.01) + bytes((i * 7) % 256 for i in range(32))
    return out


def model(q8=False):
    vocab, n = spm_vocab()
    dim, ffn, heads, kv = 32, 64, 2, 1
    hd = dim // heads
    kvs = [('general.architecture', T_STR, 'llama'), ('general.name', T_STR, 'fuzz-seed'),
           ('llama.context_length', T_U32, 64), ('llama.embedding_length', T_U32, dim),
           ('llama.block_count', T_U32, 1), ('llama.feed_forward_length', T_U32, ffn),
           ('llama.attention.head_count', T_U32, heads), ('llama.attention.head_count_kv', T_U32, kv),
           ('llama.rope.dimension_count', T_U32, hd), ('llama.rope.freq_base', T_F32, 10000.0),
           ('llama.attention.layer_norm_rms_epsilon', T_F32, 1e-5)] + vocab
    mat = (lambda name, r, c: (name, 8, [c, r], q8_0(r, c))) if q8 else \
        (lambda name, r, c: (name, 0, [c, r], f32(r * c)))
    tensors = [('token_embd.weight', 0, [dim, n], f32(n * dim)), ('output_norm.weight', 0, [dim], f32(dim, 1.0)),
               ('blk.0.attn_norm.weight', 0, [dim], f32(dim, 1.0)), mat('blk.0.attn_q.weight', dim, dim),
               mat('blk.0.attn_k.weight', kv * hd, dim), mat('blk.0.attn_v.weight', kv * hd, dim),
               mat('blk.0.attn_output.weight', dim, dim), ('blk.0.ffn_norm.weight', 0, [dim], f32(dim, 1.0)),
               mat('blk.0.ffn_gate.weight', ffn, dim), mat('blk.0.ffn_up.weight', ffn, dim),
               mat('blk.0.ffn_down.weight', dim, ffn)]
    return gguf(kvs, tensors)


def bpe_vocab():
    tokens = [chr(c) for c in range(33, 127)] + ['\u0120', '\u0120t', 'he', '\u0120the', '<|endoftext|>']
    merges = ['\u0120 t', 'h e', '\u0120t he']
    return gguf([('tokenizer.ggml.model', T_STR, 'gpt2'), ('tokenizer.ggml.pre', T_STR, 'llama3'),
                 ('tokenizer.ggml.tokens', T_ARR, (T_STR, tokens)),
                 ('tokenizer.ggml.merges', T_ARR, (T_STR, merges)),
                 ('tokenizer.ggml.eos_token_id', T_U32, len(tokens) - 1)], [])


def all_types():
    kvs = [('general.alignment', T_U32, 64), ('u8', T_U8, 200), ('i8', T_I8, -5), ('u16', T_U16, 60000),
           ('i16', T_I16, -300), ('u32', T_U32, 4000000000), ('i32', T_I32, -7), ('f32', T_F32, 1.5),
           ('bool', T_BOOL, False), ('str', T_STR, 'h\u00e9llo'), ('u64', T_U64, 2 ** 63),
           ('i64', T_I64, -2 ** 40), ('f64', T_F64, 2.5),
           ('nested', T_ARR, (T_ARR, [(T_I32, [1, 2, 3]), (T_STR, ['a', 'b'])])),
           ('floats', T_ARR, (T_F64, [0.5, -1.0]))]
    tensors = [('t0', 1, [4, 2], b'\0' * 16), ('t1', 30, [3], b'\1' * 6)]
    return gguf(kvs, tensors, alignment=64)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / 'gguf')
    out.mkdir(exist_ok=True)
    vocab, _ = spm_vocab()
    (out / 'seed_spm_vocab.gguf').write_bytes(gguf(vocab, []))
    (out / 'seed_bpe_vocab.gguf').write_bytes(bpe_vocab())
    (out / 'seed_model_f32.gguf').write_bytes(model())
    (out / 'seed_model_q8_0.gguf').write_bytes(model(q8=True))
    (out / 'seed_all_types.gguf').write_bytes(all_types())


if __name__ == '__main__':
    main()
