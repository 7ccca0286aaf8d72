#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (fuzz/corpus/<target>/) and the shared
dictionary (fuzz/latentllm.dict). One-off fixture generator: its outputs are committed and neither
the build, the tests nor CI run it. Everything is synthetic (tiny vocabularies, merges, configs and
a hand-encoded SentencePiece ModelProto); nothing is copied from ../shared.

Multi-file inputs join their files with SPLIT (fuzz/support.hpp kSplit) in the order each
fuzz/fuzz_<target>.cpp documents. Seeds named regress-* are minimized inputs that once crashed a
target (tests/unit/test_fuzz_regressions.cpp has one test each); they are kept as they are.

Usage: python3 scripts/gen_fuzz_corpus.py   (from anywhere; rewrites the seed-* files)
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz")
SPLIT = b"\n@@split@@\n"


def write(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def clear_seeds(target):
    d = os.path.join(ROOT, "corpus", target)
    if os.path.isdir(d):
        for n in os.listdir(d):
            if n.startswith("seed-"):
                os.remove(os.path.join(d, n))


def jdump(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def join(*parts):
    return SPLIT.join(p.encode("utf-8") if isinstance(p, str) else p for p in parts)


# ---- safetensors ------------------------------------------------------------------------------

def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), stored back to back."""
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = jdump(header)
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def gen_safetensors():
    t = "safetensors"
    clear_seeds(t)
    f32 = struct.pack("<6f", 1, -2, 0.5, 3, 4, 5)
    f16 = struct.pack("<4e", 1, 2, -0.25, 65504)
    bf16 = struct.pack("<2H", 0x3F80, 0xC000)
    write(t, "seed-basic", safetensors([("a", "F32", [2, 3], f32), ("b", "F16", [4], f16)], {"format": "pt"}))
    write(t, "seed-bf16-scalar-empty", safetensors(
        [("w.weight", "BF16", [2], bf16), ("s", "F32", [], struct.pack("<f", 7)), ("e", "F16", [0, 3], b"")]))
    write(t, "seed-no-metadata", safetensors([("x", "F32", [1, 1, 1, 1], struct.pack("<f", 1))]))
    # A quantized module's three tensors (docs/FORMAT.md "Quantized tensors"): U8 codes [rows, n_g, G*q/8],
    # F16 scales and zero points [rows, n_g]; 2 rows, one 4-bit group of 8.
    write(t, "seed-quantized", safetensors([
        ("m.B.qweight", "U8", [2, 1, 4], bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE])),
        ("m.B.scales", "F16", [2, 1], struct.pack("<2e", 0.5, 0.25)),
        ("m.B.qzeros", "F16", [2, 1], struct.pack("<2e", 8, 7.5))]))
    shard = safetensors([("a", "F32", [2], struct.pack("<2f", 1, 2)), ("b", "F16", [1], struct.pack("<e", 3))])
    index = jdump({"metadata": {"total_size": 10}, "weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})
    write(t, "seed-sharded", join(index, shard))
    # Invalid layouts, for the error paths: a gap, an overlap, a dtype the reference knows.
    hdr = jdump({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})
    write(t, "seed-gap", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 8)
    hdr = jdump({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
                 "b": {"dtype": "F16", "shape": [2], "data_offsets": [2, 6]}})
    write(t, "seed-overlap", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 6)
    hdr = jdump({"a": {"dtype": "I8", "shape": [2], "data_offsets": [0, 2]}})
    write(t, "seed-i8", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 2)


# ---- config.json ------------------------------------------------------------------------------

def gen_config():
    t = "config"
    clear_seeds(t)
    opt = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 50272, "hidden_size": 64,
           "num_hidden_layers": 2, "ffn_dim": 256, "num_attention_heads": 4, "max_position_embeddings": 2048,
           "word_embed_proj_dim": 64, "do_layer_norm_before": True, "enable_bias": True,
           "activation_function": "relu", "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
           "torch_dtype": "float16"}
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512, "hidden_size": 64,
             "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
             "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
             "rope_scaling": None, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
             "bos_token_id": 1, "eos_token_id": [2, 3], "dtype": "bfloat16"}
    qwen2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 1000, "hidden_size": 32,
             "intermediate_size": 88, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 8, "max_position_embeddings": 128, "use_sliding_window": False, "sliding_window": 4096}
    mistral = {"model_type": "mistral", "vocab_size": 100, "hidden_size": 16, "intermediate_size": 40,
               "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64,
               "sliding_window": None, "pad_token_id": None}
    for name, doc in [("opt", opt), ("llama", llama), ("qwen2", qwen2), ("mistral", mistral)]:
        write(t, "seed-" + name, json.dumps(doc, indent=2) + "\n")
    write(t, "seed-bad-type", jdump(dict(llama, hidden_size="64")))
    write(t, "seed-array", b"[1, 2.5e3, \"x\", null, true]")


# ---- datasets ---------------------------------------------------------------------------------

def gen_dataset():
    t = "dataset"
    clear_seeds(t)
    wiki = " = Valkyria Chronicles III = \r\n \n Senj\u014d no Valkyria 3 : Unrecorded Chronicles .\n\n \t\n" \
           " = = Gameplay = = \rThe game 's battle system \u2013 the BliTZ system \u2013 is carried over .\n"
    ptb = " aer banknote berlitz calloway centrust \n pierre <unk> N years old will join the board \n\n"
    c4 = "".join(jdump({"text": s, "timestamp": "2019-04-25T12:57:54Z", "url": "https://example.com/" + str(i)})
                 .decode() + "\n" for i, s in enumerate(
                     ["Beginners BBQ Class Taking Place in Missoula!\nDo you want to get better?",
                      "Discussion in 'Mac OS X Lion (10.7)' started by axboi87, Jan 20, 2012.",
                      "Foil plaid lycra and spandex shortall with metallic slinky insets. \u00e9\u4e2d\U0001F600"]))
    for sel, name, body in [(0, "wikitext2", wiki), (1, "ptb", ptb), (2, "c4", c4), (3, "text", wiki + ptb),
                            (4, "jsonl-all", c4 + "\n  \n"), (5, "jsonl-one", c4), (6, "jsonl-two", "{}\n" + c4)]:
        write(t, "seed-" + name, bytes([sel]) + body.encode("utf-8"))


# ---- tokenizers -------------------------------------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_CHARS = bytes_to_unicode()
TEXT = "Hello world! hello  wor\u00efld\n\n</s> 1234 \u00fcn\u00efc\u00f6d\u00e9 \u4e2d\u6587 \U0001F600<unk>tab\there"


def byte_level(s):
    return "".join(BYTE_CHARS[b] for b in s.encode("utf-8"))


def bpe_from_words(words, alphabet):
    """A vocabulary and merges that build each word left to right from its characters."""
    vocab = {}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    merges = []
    for w in words:
        cur = w[0]
        for ch in w[1:]:
            if cur + ch not in vocab:
                merges.append((cur, ch))
                vocab[cur + ch] = len(vocab)
            cur += ch
    return vocab, merges


def gen_tokenizer_gpt2():
    t = "tokenizer_gpt2"
    clear_seeds(t)
    words = [byte_level(w) for w in ["hello", " world", " hello", "Hello", " wor", "12", "34"]]
    vocab, merges = bpe_from_words(words, [BYTE_CHARS[b] for b in range(256)])
    vocab["</s>"] = len(vocab)
    merges_txt = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
    config = jdump({"add_bos_token": True, "bos_token": {"content": "</s>", "lstrip": False}, "eos_token": "</s>",
                    "unk_token": "</s>", "pad_token": "<pad>", "add_prefix_space": False,
                    "additional_special_tokens": ["<extra>"]})
    write(t, "seed-opt-like", join(jdump(vocab), merges_txt, config, TEXT))
    write(t, "seed-gpt2-defaults", join(jdump(vocab), merges_txt.replace("\n", "\r\n"), b"", TEXT))
    small_vocab = {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4}
    write(t, "seed-tiny", join(jdump(small_vocab), "a b\n\u0120 ab\n", jdump({"add_prefix_space": True}), "ab ab"))


def tokenizer_json(model, normalizer=None, pre_tokenizer=None, post_processor=None, added=()):
    return jdump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added),
                  "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post_processor,
                  "decoder": None, "model": model})


def added_token(content, id_, special=True, normalized=False, lstrip=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def gen_tokenizer_json():
    t = "tokenizer_json"
    clear_seeds(t)
    # GPT-2 / OPT style: ByteLevel, template "</s> $A".
    words = [byte_level(w) for w in ["hello", " world", " hello", "Hello"]]
    vocab, merges = bpe_from_words(words, [BYTE_CHARS[b] for b in range(256)])
    vocab["</s>"] = len(vocab)
    bl = tokenizer_json(
        {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
         "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
         "merges": [f"{a} {b}" for a, b in merges]},
        pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "</s>", "type_id": 0}},
                                   {"Sequence": {"id": "A", "type_id": 0}}],
                        "pair": [], "special_tokens": {"</s>": {"id": "</s>", "ids": [vocab["</s>"]],
                                                                "tokens": ["</s>"]}}},
        added=[added_token("</s>", vocab["</s>"], lstrip=True, rstrip=True)])
    write(t, "seed-bytelevel", join(bl, b"", TEXT))
    # Llama-2 style: Prepend + Replace normalizer, byte fallback, fused unk, LlamaTokenizerFast config.
    sp = "\u2581"
    alphabet = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list(sp + "helowrd!")
    vocab, merges = bpe_from_words([sp + "hello", sp + "world", "he"], alphabet)
    llama = tokenizer_json(
        {"type": "BPE", "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True, "vocab": vocab,
         "merges": [f"{a} {b}" for a, b in merges]},
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": sp},
            {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
        post_processor={"type": "TemplateProcessing",
                        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                   {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}},
        added=[added_token("<unk>", 0, normalized=True), added_token("<s>", 1), added_token("</s>", 2)])
    config = jdump({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": True,
                    "bos_token": {"content": "<s>"}, "eos_token": "</s>"})
    write(t, "seed-llama", join(llama, config, TEXT))
    # Metaspace + Split regex + NFC, merges as pairs, ignore_merges (Llama-3 / newer files).
    vocab, merges = bpe_from_words([sp + "hello", sp + "world", "12"], ["<unk>"] + list(sp + "helowrd!1234"))
    meta = tokenizer_json(
        {"type": "BPE", "unk_token": "<unk>", "ignore_merges": True, "vocab": vocab,
         "merges": [[a, b] for a, b in merges]},
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
            {"type": "Split", "pattern": {"String": "!"}, "behavior": "MergedWithPrevious", "invert": True},
            {"type": "Metaspace", "replacement": sp, "prepend_scheme": "first", "split": True}]},
        post_processor={"type": "Sequence", "processors": [
            {"type": "ByteLevel", "trim_offsets": False},
            {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                                      {"SpecialToken": {"id": "<unk>", "type_id": 0}}],
             "special_tokens": {}}]},
        added=[added_token("<unk>", 0)])
    write(t, "seed-metaspace", join(meta, b"", TEXT))
    contiguous = tokenizer_json(
        {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, " ": 3}, "merges": ["a b"]},
        pre_tokenizer={"type": "Split", "pattern": {"Regex": "[ab]+"}, "behavior": "Contiguous", "invert": False},
        normalizer={"type": "Replace", "pattern": {"Regex": "c"}, "content": "ab"})
    write(t, "seed-contiguous", join(contiguous, b"", "abc ab cab"))


# ---- SentencePiece ModelProto (sentencepiece_model.proto), hand-encoded ---------------------------

def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field_varint(num, v):
    return varint(num << 3 | 0) + varint(v)


def field_bytes(num, b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return varint(num << 3 | 2) + varint(len(b)) + b


def field_float(num, f):
    return varint(num << 3 | 5) + struct.pack("<f", f)


NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
UNIGRAM, BPE = 1, 2


def sp_model(pieces, model_type, byte_fallback=False, add_dummy_prefix=True, remove_extra_ws=False):
    """pieces: (piece, score, type); ids 0, 1, 2 must be <unk>, <s>, </s> (the TrainerSpec defaults)."""
    out = b""
    for piece, score, typ in pieces:
        out += field_bytes(1, field_bytes(1, piece) + field_float(2, score) + field_varint(3, typ))
    trainer = field_varint(3, model_type) + field_varint(4, len(pieces)) + field_varint(35, int(byte_fallback))
    out += field_bytes(2, trainer)
    normalizer = (field_bytes(1, "identity") + field_varint(3, int(add_dummy_prefix)) +
                  field_varint(4, int(remove_extra_ws)) + field_varint(5, 1))
    out += field_bytes(3, normalizer)
    return out


def gen_tokenizer_spm():
    t = "tokenizer_spm"
    clear_seeds(t)
    sp = "\u2581"
    specials = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL)]
    chars = list(sp + "helowrd!1234")
    # BPE: merged pieces score higher the earlier they merge; byte fallback for everything else.
    _, merges = bpe_from_words([sp + "hello", sp + "world", "12"], chars)
    merged = [a + b for a, b in merges]
    bpe = specials + [(f"<0x{b:02X}>", 0.0, BYTE) for b in range(256)] + \
        [(p, -float(i), NORMAL) for i, p in enumerate(merged + chars)]
    unigram = specials + [(p, -1.0 - 0.1 * len(p) * (i % 3), NORMAL) for i, p in
                          enumerate(chars + [sp + "hello", sp + "world", "he", "llo", "wor"])]
    config = jdump({"add_bos_token": True, "add_eos_token": True, "bos_token": "<s>", "eos_token": "</s>"})
    write(t, "seed-bpe-bytefallback", join(config, TEXT, sp_model(bpe, BPE, byte_fallback=True)))
    write(t, "seed-unigram", join(b"", "hello world\n" * 3, sp_model(unigram, UNIGRAM)))
    # Longer than the 2048-byte chunks the encoder cuts at newlines (identity normalizer, no "\n" piece).
    write(t, "seed-bpe-chunked", join(b"", "hello  world!\n\n 1234\n" * 120, sp_model(bpe, BPE, byte_fallback=True)))
    write(t, "seed-unigram-nodummy", join(jdump({"add_bos_token": False}), TEXT,
                                          sp_model(unigram, UNIGRAM, add_dummy_prefix=False, remove_extra_ws=True)))


# ---- image ------------------------------------------------------------------------------------

def gen_image():
    """Seeds from the golden images of src/image (tests/data/golden/images, scripts/gen_image_golden.py):
    the small ones, one per PNG colour type and bit depth and per JPEG kind."""
    t = "image"
    clear_seeds(t)
    golden = os.path.join(ROOT, "..", "tests", "data", "golden", "images")
    for name in ["rgb_3x7.png", "rgba_45x30.png", "la_20x25.png", "p_trns_37x23.png", "p4bit_17x9.png",
                 "bit1_31x15.png", "gray16_23x11.png", "rgb16_19x21.png", "gray2_13x5.png",
                 "jpeg_rgb444_24x18.jpg", "jpeg_gray_40x33.jpg", "jpeg_cmyk_30x20.jpg", "jpeg_rgb_prog_57x43.jpg",
                 "jpeg_rgb444_prog_16x12.jpg"]:
        with open(os.path.join(golden, name), "rb") as f:
            write(t, "seed-" + name.replace(".", "-"), f.read())


# ---- dictionary -------------------------------------------------------------------------------

# ---- multimodal (LLaVA config, preprocessor config, ScienceQA) ---------------------------------

def gen_multimodal():
    """fuzz_multimodal: config.json, preprocessor_config.json, problems.json, pid_splits.json."""
    t = "multimodal"
    clear_seeds(t)
    text = {"model_type": "llama", "vocab_size": 300, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 128}
    vision = {"model_type": "clip_vision_model", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 3,
              "num_attention_heads": 2, "image_size": 32, "patch_size": 8, "hidden_act": "quick_gelu"}
    llava = {"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "text_config": text,
             "vision_config": vision, "image_token_index": 299, "vision_feature_layer": -2,
             "vision_feature_select_strategy": "default", "projector_hidden_act": "gelu", "image_seq_length": 16}
    nxt = dict(llava, architectures=["LlavaNextForConditionalGeneration"], model_type="llava_next",
               image_grid_pinpoints=[[32, 32], [32, 64], [64, 32]], vision_feature_layer=[-2, -1])
    clip = {"image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": 32},
            "resample": 3, "do_center_crop": True, "crop_size": {"height": 32, "width": 32}, "do_rescale": True,
            "rescale_factor": 0.00392156862745098, "do_normalize": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}
    nproc = dict(clip, image_processor_type="LlavaNextImageProcessor",
                 image_grid_pinpoints=[[32, 32], [32, 64], [64, 32]], do_pad=True)
    problems = {"7": {"question": "Which shape is red?", "choices": ["circle", "square", "star"], "answer": 1,
                      "hint": "", "image": None, "task": "closed choice", "grade": "grade3",
                      "subject": "natural science", "topic": "shapes", "category": "Colors", "skill": "x",
                      "lecture": "", "solution": "", "split": "val"},
                "8": {"question": "Count them.", "choices": ["1", "2"], "answer": 0, "hint": "Context here.",
                      "image": None, "grade": "grade8", "subject": "language science", "split": "val"}}
    splits = {"train": [], "val": ["7", "8"], "test": []}
    write(t, "seed-llava", join(jdump(llava), jdump(clip), jdump(problems), jdump(splits)))
    write(t, "seed-next", join(jdump(nxt), jdump(nproc), jdump(problems), jdump({"val": ["8"]})))
    write(t, "seed-bad", join(jdump(dict(llava, vision_feature_layer=9)), jdump(dict(clip, crop_size=0)),
                              jdump({"7": dict(problems["7"], answer=5)}), jdump({"val": ["7", "9"]})))


# ---- packed quantized tensors ------------------------------------------------------------------

def gen_quant_packed():
    """fuzz_quant_packed: 10 int16 (bits, group, cols, codes shape, scales shape, zeros shape), then
    codes, scales (F16), zero points (F16) joined by SPLIT."""
    clear_seeds("quant_packed")

    def packed(bits, group, cols, rows, code_bytes, scale=0x2c00, zero=0x4700):
        n_g = (cols + group - 1) // group
        gb = group * bits // 8
        head = struct.pack("<10h", bits, group, cols, rows, n_g, gb, rows, n_g, rows, n_g)
        halves = lambda v: struct.pack("<H", v) * (rows * n_g)
        return head + join(code_bytes, halves(scale), halves(zero))

    # 2 rows of 20 columns at 4 bits in groups of 8: n_g 3, 4 bytes a group, the last 4 codes padding.
    row4 = bytes([0x21, 0x43, 0x65, 0x87, 0xa9, 0xcb, 0xed, 0x0f, 0x33, 0x33, 0x00, 0x00])
    write("quant_packed", "seed-q4", packed(4, 8, 20, 2, row4 * 2))
    write("quant_packed", "seed-q3", packed(3, 8, 16, 1, bytes([0xd1, 0x58, 0x1f, 0xff, 0x00, 0x7e])))
    write("quant_packed", "seed-q8", packed(8, 16, 16, 1, bytes(range(16))))
    write("quant_packed", "seed-q2-padding", packed(2, 32, 20, 1, bytes([0xe4] * 5 + [0x01, 0, 0])))


def gen_dict():
    words = ["@@split@@", "\n@@split@@\n", "{", "}", "[", "]", ":", ",", "null", "true", "false", "1e999", "-1",
             "18446744073709551616", "\\u0000", "\\ud800",
             # safetensors
             "__metadata__", "dtype", "shape", "data_offsets", "F32", "F16", "BF16", "I8", "weight_map",
             # config.json
             "architectures", "model_type", "OPTForCausalLM", "LlamaForCausalLM", "Qwen2ForCausalLM",
             "MistralForCausalLM", "opt", "llama", "qwen2", "mistral", "vocab_size", "hidden_size",
             "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
             "ffn_dim", "max_position_embeddings", "rope_scaling", "rope_theta", "rms_norm_eps",
             "sliding_window", "use_sliding_window", "tie_word_embeddings", "eos_token_id", "bos_token_id",
             # tokenizers
             "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "model", "type", "BPE", "vocab",
             "merges", "unk_token", "byte_fallback", "fuse_unk", "ignore_merges", "Sequence", "normalizers",
             "pretokenizers", "processors", "Prepend", "prepend", "Replace", "pattern", "content", "Regex",
             "String", "NFC", "Split", "behavior", "Isolated", "Removed", "MergedWithPrevious",
             "MergedWithNext", "Contiguous", "invert", "ByteLevel", "add_prefix_space", "use_regex",
             "Metaspace", "replacement", "prepend_scheme", "first", "never", "always", "TemplateProcessing",
             "single", "SpecialToken", "special_tokens", "ids", "lstrip", "rstrip", "normalized", "special",
             "tokenizer_class", "LlamaTokenizerFast", "add_bos_token", "add_eos_token", "bos_token",
             "eos_token", "pad_token", "additional_special_tokens", "#version: 0.2", "<s>", "</s>", "<unk>",
             "<0x41>", "\u2581", "\u0120", "text", "\r\n",
             # images: PNG chunk types, JPEG markers (SOI, SOF0, SOF2, DHT, DQT, SOS, EOI, APP14 Adobe)
             "IHDR", "PLTE", "tRNS", "IDAT", "IEND", "Adobe", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff",
             b"\xff\xc0", b"\xff\xc2", b"\xff\xc4", b"\xff\xdb", b"\xff\xda", b"\xff\xd9", b"\xff\xee"]
    with open(os.path.join(ROOT, "latentllm.dict"), "w", encoding="utf-8") as f:
        f.write("# libFuzzer dictionary for every target in fuzz/ (written by scripts/gen_fuzz_corpus.py).\n")
        for w in words:
            raw = w if isinstance(w, bytes) else w.encode("utf-8")  # bytes: written as they are
            esc = "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\' else f"\\x{b:02X}" for b in raw)
            f.write(f'"{esc}"\n')


def gen_chat_template():
    """Real chat templates (tests/data/chat_templates) with a conversation, and small ones that reach the
    subset's statements, filters and bounds."""
    t = "chat_template"
    clear_seeds(t)
    conv = jdump([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}])
    src = os.path.join(ROOT, "..", "tests", "data", "chat_templates")
    for name in ("llama-2-7b-chat", "qwen2.5-7b-instruct", "llava-1.5-7b-hf"):
        with open(os.path.join(src, name + ".jinja"), "rb") as f:
            write(t, "seed-" + name, join(f.read(), conv))
    write(t, "seed-loops", join("{% for m in messages %}{{ loop.index }}:{{ m.role|upper }} {{ m.content|trim }}"
                                "{% if not loop.last %}\n{% endif %}{% endfor %}{{ range(3)|list|tojson }}", conv))
    write(t, "seed-namespace", join("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                                    "{% endfor %}{{ ns.n * 'ab' }}{{ bos_token ~ eos_token }}", b"not json"))
    write(t, "seed-raise", join("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}",
                                conv))


if __name__ == "__main__":
    gen_safetensors()
    gen_config()
    gen_dataset()
    gen_tokenizer_gpt2()
    gen_tokenizer_json()
    gen_tokenizer_spm()
    gen_image()
    gen_multimodal()
    gen_quant_packed()
    gen_chat_template()
    gen_dict()
