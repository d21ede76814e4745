// reprise demo page: the network switches, the chat pane and the log. Plain
// JavaScript modules, no build step, no dependencies.
import { Session, SSEParser, aheadHint, replayNote, savedDuplicates, savedSummary } from './session.js';
import { callsSummary } from './session.js';
import { SpeechPane } from './speech.js';

const $ = (id) => document.getElementById(id);

// demoPrice prices the demo model when the server knows no price (run
// without --prices): an illustrative $2.50 per million prompt tokens and
// $10 per million completion tokens, labelled as such on the page.
export const demoPrice = { input_per_1m: 2.5, output_per_1m: 10 };

function log(msg) {
  const el = $('log');
  const li = document.createElement('li');
  const t = document.createElement('time');
  t.textContent = new Date().toLocaleTimeString();
  li.append(t, ' ', msg);
  el.prepend(li);
  while (el.children.length > 80) el.lastChild.remove();
}

// settings are the network switches, read at every decision.
function settings() {
  const every = Math.max(1, Math.min(1000, parseInt($('every').value, 10) || 15));
  return {
    mode: $('mode-ws').checked ? 'ws' : 'sse',
    unreliable: $('unreliable').checked,
    every,
    delay: Math.max(0, Math.min(10000, parseInt($('delay').value, 10) || 0)), // ms before an unreliable network's reconnect
    autoresume: $('autoresume').checked,
  };
}

function text(id, v) {
  const el = $(id);
  const s = v == null ? '' : String(v);
  if (el.textContent !== s) el.textContent = s;
}

function dollars(v) {
  if (v == null || !isFinite(v)) return '';
  if (v === 0) return '$0';
  return v < 0.01 ? `$${v.toFixed(6)}` : `$${v.toFixed(4)}`;
}

// naiveGenerations is how many upstream generations a client without
// reprise would have caused: each drop re-POSTs and starts over, and so
// does each duplicate request reprise answered from the journal (the
// server's resumes are the drops, counted by the client as they happen).
export function naiveGenerations(s, st) {
  const gens = st && st.generation ? st.generation : 1;
  return gens + s.drops + savedDuplicates(st && st.saved);
}

// ---------------------------------------------------------------------------
// Chat pane.
// ---------------------------------------------------------------------------
const chat = {
  text: '',
  tokens: 0, // content deltas delivered
};

const chatSession = new Session({
  path: '/v1/chat/completions',
  settings,
  log: (m) => log(`chat: ${m}`),
  apply(ev) {
    if (ev.data === '[DONE]') return true;
    const chunk = JSON.parse(ev.data);
    if (chunk && chunk.error) throw new Error(chunk.error.message || 'upstream error');
    const choice = chunk && Array.isArray(chunk.choices) ? chunk.choices[0] : null;
    const content = choice && choice.delta ? choice.delta.content : null;
    if (typeof content === 'string' && content !== '') {
      chat.text += content;
      chat.tokens++;
    }
    return false;
  },
  reset() {
    chat.text = '';
    chat.tokens = 0;
  },
  changed: renderChat,
});

function renderChat() {
  const s = chatSession;
  const st = s.status || {};
  const out = $('output');
  if (out.textContent !== chat.text) {
    out.textContent = chat.text;
    out.scrollTop = out.scrollHeight; // follow the answer as it grows
  }
  out.dataset.state = s.state;
  // A screen reader reads the answer once it stops growing, not at every token.
  out.setAttribute('aria-busy', String(s.state === 'streaming' || s.state === 'resuming'));
  text('conn', s.state);
  $('conn').dataset.state = s.state;
  const err = $('error');
  err.hidden = !s.error || s.state !== 'error';
  text('error', err.hidden ? '' : s.error);

  text('key', s.key);
  text('lastid', s.lastId);
  text('count', s.count);
  text('dupes', s.dupes);
  text('drops', `${s.drops} / ${s.reconnects}`);
  text('replayed', s.replayed);
  text('replay-note', replayNote(s));
  text('server-state', st.state);
  text('server-generation', st.generation);
  text('server-events', st.events);
  text('server-updated', st.updated_at ? new Date(st.updated_at).toLocaleTimeString() : '');
  text('tokens-delivered', chat.tokens);
  text('ahead', aheadHint(s));

  // Billed: every generation of the key (docs/cost.md), known once one ends.
  const billed = st.billed || st.usage;
  text('tokens-billed', billed ? billed.completion_tokens : '');
  const naive = naiveGenerations(s, st);
  text('gens-naive', s.key ? naive : '');
  const saved = savedSummary(st.saved);
  text('saved', saved ? `saved by reprise: ${saved}` : '');

  let cost = null;
  let note = '';
  if (typeof st.cost === 'number') {
    cost = st.billed && typeof st.billed.cost === 'number' ? st.billed.cost : st.cost;
    note = 'Cost by the server’s price table (--prices).';
  } else if (billed) {
    cost = (billed.prompt_tokens * demoPrice.input_per_1m + billed.completion_tokens * demoPrice.output_per_1m) / 1e6;
    note = `Demo price: the server has no price table (--prices), so the page prices the demo model at an illustrative $${demoPrice.input_per_1m} / $${demoPrice.output_per_1m} per million prompt / completion tokens.`;
  }
  text('cost-key', dollars(cost));
  text('calls', callsSummary(st));
  const perGen = cost != null && st.generation ? cost / st.generation : cost;
  text('cost-naive', perGen == null ? '' : dollars(perGen * naive));
  text('cost-note', note && `${note} A naive client re-POSTs on every drop: one new generation each.`);

  $('drop').disabled = !s.conn;
  $('stop').disabled = !s.conn && s.state !== 'dropped';
  $('resume').disabled = !s.location || !!s.conn;
  $('replay').disabled = !s.key || !s.body;
  $('regenerate').disabled = !s.body || !!s.conn;
  text('answer', answerLine(s));
}

// previousState says what became of the key before a Regenerate's.
const previousState = {
  cancelled: 'was cancelled (Stop)',
  in_progress: 'still generating (a Drop leaves it running)',
  completed: 'completed',
  failed: 'failed',
};

// answerLine says which answer to the prompt the pane shows: each
// Regenerate is a new key and a new generation, however alike the texts
// (the demo model's are the same for the same prompt).
export function answerLine(s) {
  if (!s.key) return '';
  let line = `Answer ${s.answer} to this prompt · key ${s.key.slice(0, 8)}…`;
  if (s.previous) line += ` · the previous key ${s.previous.key.slice(0, 8)}… ${previousState[s.previous.state] || s.previous.state || ''}`;
  return line;
}

function generate() {
  chat.text = '';
  chat.tokens = 0;
  chatSession.start(JSON.stringify({
    model: 'demo',
    stream: true,
    messages: [{ role: 'user', content: $('prompt').value }],
  }));
}

// regenerate sends the last prompt again as a new request (a new key): the
// answer starts over from its first token.
function regenerate() {
  if (!chatSession.body) return;
  chat.text = '';
  chat.tokens = 0;
  chatSession.start(chatSession.body);
}

function init() {
  $('generate').addEventListener('click', generate);
  $('drop').addEventListener('click', () => chatSession.drop('dropped by you — the server keeps generating', false));
  $('stop').addEventListener('click', () => chatSession.cancel());
  $('regenerate').addEventListener('click', regenerate);
  $('resume').addEventListener('click', () => chatSession.resume());
  $('replay').addEventListener('click', () => chatSession.replay());
  $('autoresume').addEventListener('change', () => {
    if ($('autoresume').checked && !chatSession.conn && chatSession.state === 'dropped') {
      log('chat: auto-resume in 1000 ms');
      chatSession.scheduleResume(1000);
    }
    if (!$('autoresume').checked) {
      clearTimeout(chatSession.resumeTimer);
      chatSession.resumeTimer = 0;
    }
  });
  $('unreliable').addEventListener('change', () => {
    const s = settings();
    log(s.unreliable ? `network: unreliable — every connection drops after ${s.every} events and reconnects ${s.delay} ms later` : 'network: reliable');
  });
  for (const id of ['mode-sse', 'mode-ws']) {
    $(id).addEventListener('change', () => log(`transport: ${settings().mode === 'ws' ? 'WebSocket' : 'SSE'} for the next connection`));
  }
  const speech = new SpeechPane({ settings, log: (m) => log(`speech: ${m}`) });
  renderChat();

  // Exposed for tests and for the curious in the DevTools console.
  window.reprise = { SSEParser, state: chatSession, chat, speech };
}

init();
