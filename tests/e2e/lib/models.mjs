// Test models with real vocabularies and real chat templates, written by `kvserve mkmodel`
// (random weights, ~0.3 s) into a temporary folder: the chat-template families that a client's
// requests are rendered in (tool formats, chat templates) without shipping model files.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { BIN } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
export const SHARED = process.env.KVSERVE_SHARED ?? path.resolve(here, '../../../../shared');

// The GGUF path of a tiny model with `vocab` (a ../shared/tokenizer vocabulary) and the chat
// template in tests/data/`template`; null when the vocabulary is not there.
export function vocabModel(name, { vocab, template, controlTokens = [], bos, eos }) {
  const vocabFile = path.join(SHARED, 'tokenizer', `ggml-vocab-${vocab}.gguf`);
  if (!fs.existsSync(vocabFile)) return null;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvserve-e2e-'));
  const out = path.join(dir, `${name}.gguf`);
  const args = ['mkmodel', '--preset', 'tiny', '--vocab', vocabFile, '-o', out,
                '--chat-template', path.resolve(here, '../../data', template)];
  for (const t of controlTokens) args.push('--control-token', t);
  if (bos) args.push('--bos', bos);
  if (eos) args.push('--eos', eos);
  execFileSync(BIN, args, { stdio: 'ignore' });
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return out;
}

// Qwen2.5's template (tools in the Hermes format) over the GPT-2 vocabulary.
export function hermesModel() {
  return vocabModel('qwen-tools', { vocab: 'gpt-2', template: 'qwen2.5-tools.jinja',
                                    controlTokens: ['<|im_start|>', '<|im_end|>'], eos: '<|im_end|>' });
}

// Llama 3.1's template (JSON calls, results in ipython turns) over the GPT-2 vocabulary.
export function llama31Model() {
  return vocabModel('llama31-tools', { vocab: 'gpt-2', template: 'llama3.1-tools.jinja',
                                       controlTokens: ['<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'],
                                       bos: '<|begin_of_text|>', eos: '<|eot_id|>' });
}

// Mistral v0.3's template ([TOOL_CALLS], [TOOL_RESULTS]) over Llama 2's vocabulary, which
// Mistral's extends with these control tokens.
export function mistralModel() {
  return vocabModel('mistral-tools', { vocab: 'llama-spm', template: 'mistral-v0.3-tools.jinja',
                                       controlTokens: ['[INST]', '[/INST]', '[TOOL_CALLS]', '[AVAILABLE_TOOLS]',
                                                       '[/AVAILABLE_TOOLS]', '[TOOL_RESULTS]', '[/TOOL_RESULTS]'] });
}

// Models with the real templates of ../shared/templates (null when they are not there): each
// template's tool-call syntax, derived from it by the server, over a real vocabulary.
const LLAMA3 = ['<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>', '<|eom_id|>'];
const CHATML = ['<|im_start|>', '<|im_end|>'];
const DEEPSEEK = ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>', '<｜Assistant｜>'];
export const sharedTemplateModels = {
  'qwen3-coder (Qwen3-Coder: arguments as markup)':
    { template: 'Qwen3-Coder.jinja', vocab: 'gpt-2', controlTokens: CHATML, eos: '<|im_end|>' },
  'deepseek (DeepSeek-R1-Distill-Qwen-32B)':
    { template: 'deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja', vocab: 'gpt-2', controlTokens: DEEPSEEK,
      bos: DEEPSEEK[0], eos: DEEPSEEK[1], args: ['--reasoning-format', 'none'] },
  'deepseek (DeepSeek-V3.1)':
    { template: 'deepseek-ai-DeepSeek-V3.1.jinja', vocab: 'gpt-2', controlTokens: DEEPSEEK, bos: DEEPSEEK[0], eos: DEEPSEEK[1] },
  'mistral (Mistral-Small-3.2: [CALL_ID] [ARGS])':
    { template: 'Mistral-Small-3.2-24B-Instruct-2506.jinja', vocab: 'llama-spm', id: /^[A-Za-z0-9]{9}$/,
      controlTokens: ['[INST]', '[/INST]', '[TOOL_CALLS]', '[CALL_ID]', '[ARGS]', '[AVAILABLE_TOOLS]', '[/AVAILABLE_TOOLS]',
                      '[TOOL_RESULTS]', '[/TOOL_RESULTS]', '[SYSTEM_PROMPT]', '[/SYSTEM_PROMPT]'] },
  'functionary (functionary-medium-v3.1)':
    { template: 'meetkai-functionary-medium-v3.1.jinja', vocab: 'gpt-2', controlTokens: [...LLAMA3, '<|python_tag|>'],
      bos: LLAMA3[0], eos: '<|eot_id|>' },
  'glm (GLM-4.6: arguments as markup)':
    { template: 'GLM-4.6.jinja', vocab: 'gpt-2', controlTokens: ['[gMASK]', '<sop>', '<|system|>', '<|user|>', '<|assistant|>', '<|observation|>'],
      eos: '<|user|>', args: ['--reasoning-format', 'none'] },
  'gpt-oss (harmony: analysis, then the call)':
    { template: 'openai-gpt-oss-120b.jinja', vocab: 'gpt-2', eos: '<|return|>',
      controlTokens: ['<|start|>', '<|channel|>', '<|message|>', '<|end|>', '<|return|>', '<|call|>', '<|constrain|>'] },
  'hermes (granite-4.0)':
    { template: 'ibm-granite-granite-4.0.jinja', vocab: 'gpt-2',
      controlTokens: ['<|start_of_role|>', '<|end_of_role|>', '<|end_of_text|>'], eos: '<|end_of_text|>' },
};

export function sharedTemplateModel(name) {
  const m = sharedTemplateModels[name];
  const file = path.join(SHARED, 'templates', m.template);
  if (!fs.existsSync(file)) return null;
  return vocabModel(m.template.replace(/\.jinja$/, ''), { ...m, template: file });
}
