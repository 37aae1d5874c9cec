// attnscope viewer: head, model and neuron views of one sequence, offline (no library, no
// request). The page's arrays are described in analyses/views/payload.py; every map is
// computed here from them: attention weights from q and k, norms as alpha * ||f(x)||, the
// stored scopes from their top-k keys per query row.
"use strict";

const header = JSON.parse(document.getElementById("attnscope-header").textContent);
const H = header.heads, N = header.n, L = header.layers, DH = header.d_head;
const SVG_NS = "http://www.w3.org/2000/svg";
const state = {
  view: "head", source: "weights", layer: 1, level: "pieces", filter: "all", topk: 5,
  threshold: 0.01, heads: new Set([...Array(H).keys()]), focus: null, neuronHead: 0, query: 1,
  predictionIndex: 0, predictionMeasure: "logit", whyKey: null,
};
let arrays = null;
const cache = new Map();
const $ = (id) => document.getElementById(id);

// ---- data -------------------------------------------------------------------------------

function halfToFloat(half) {
  const out = new Float32Array(half.length);
  for (let i = 0; i < half.length; i++) {
    const x = half[i], sign = x & 0x8000 ? -1 : 1, e = (x >> 10) & 0x1f, m = x & 0x3ff;
    if (e === 0) out[i] = sign * m * 5.960464477539063e-8;
    else if (e === 31) out[i] = m ? NaN : sign * Infinity;
    else out[i] = sign * (1 + m / 1024) * 2 ** (e - 15);
  }
  return out;
}

async function inflate(described, base64) {
  const raw = atob(base64.trim());
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const buffer = await new Response(stream).arrayBuffer();
  const out = {};
  for (const a of described) {
    const count = a.shape.reduce((x, y) => x * y, 1);
    if (a.dtype === "float32") out[a.name] = new Float32Array(buffer, a.offset, count);
    else if (a.dtype === "uint16") out[a.name] = new Uint16Array(buffer, a.offset, count);
    else out[a.name] = halfToFloat(new Uint16Array(buffer, a.offset, count));
  }
  return out;
}

function memo(key, make) {
  if (!cache.has(key)) cache.set(key, make());
  return cache.get(key);
}

// The keys query i sees in a layer: j <= i when causal, i - j < window in a sliding window
function visibleKeys(layer, i) {
  const window = (header.sliding_window || [])[layer - 1];
  const first = window ? Math.max(0, i - window + 1) : 0;
  return [first, header.causal ? i : N - 1];
}

// The score q_i k_j * scale, soft-capped (c tanh(s / c)) where the model caps it
function score(layer, s) {
  const cap = (header.softcap || [])[layer - 1];
  s *= header.scale[layer - 1];
  return cap ? cap * Math.tanh(s / cap) : s;
}

// alpha^h_ij = softmax_j(score_ij) over visible keys: [H * N * N]
function alpha(layer) {
  return memo(`alpha/${layer}`, () => {
    const q = arrays[`q/${layer}`], k = arrays[`k/${layer}`];
    const out = new Float32Array(H * N * N);
    for (let h = 0; h < H; h++) {
      for (let i = 0; i < N; i++) {
        const row = (h * N + i) * N, qi = (h * N + i) * DH, [first, last] = visibleKeys(layer, i);
        let max = -Infinity;
        for (let j = first; j <= last; j++) {
          const kj = (h * N + j) * DH;
          let s = 0;
          for (let e = 0; e < DH; e++) s += q[qi + e] * k[kj + e];
          out[row + j] = score(layer, s);
          if (out[row + j] > max) max = out[row + j];
        }
        let total = 0;
        for (let j = first; j <= last; j++) total += (out[row + j] = Math.exp(out[row + j] - max));
        for (let j = first; j <= last; j++) out[row + j] /= total;
      }
    }
    return out;
  });
}

function sources() {
  const list = [
    { id: "weights", label: "attention weights \u03b1 (per head)", heads: H, kind: "weight" },
    { id: "norms", label: "\u2016\u03b1 f(x)\u2016 (per head)", heads: H, kind: "norm" },
    { id: "Attn-w", label: "Attn-w: mean \u03b1 over heads", heads: 1, kind: "weight" },
    { id: "AttnRes-w", label: "AttnRes-w: (Attn-w + I) / 2", heads: 1, kind: "weight" },
  ];
  for (const scope of header.scopes) {
    const label =
      scope === "Attn" ? "Attn: \u2016\u03a3_h \u03b1 f(x)\u2016"
      : scope === "Propagated" ? "Propagated: input tokens' parts of the state, through the depth"
      : `${scope}: whole layer`;
    // a token's own part holds its residual (a massive activation: 10^4 times the rest)
    list.push({ id: scope, label, heads: 1, kind: "norm", sparse: true, offDiagonal: scope !== "Attn" });
  }
  return list;
}
const SOURCES = sources();
const sourceOf = (id) => SOURCES.find((s) => s.id === id);

// The raw map of a source at one layer, pieces level: [heads * N * N]
function pieceMap(id, layer) {
  return memo(`${id}/${layer}`, () => {
    if (id === "weights") return alpha(layer);
    const a = alpha(layer);
    if (id === "norms") {
      const f = arrays[`fnorm/${layer}`], out = new Float32Array(H * N * N);
      for (let h = 0; h < H; h++)
        for (let i = 0; i < N; i++)
          for (let j = 0; j < N; j++) out[(h * N + i) * N + j] = a[(h * N + i) * N + j] * f[h * N + j];
      return out;
    }
    const out = new Float32Array(N * N);
    if (id === "Attn-w" || id === "AttnRes-w") {
      for (let h = 0; h < H; h++) for (let x = 0; x < N * N; x++) out[x] += a[h * N * N + x] / H;
      if (id === "AttnRes-w") for (let x = 0; x < N * N; x++) out[x] = (out[x] + (x % (N + 1) === 0)) / 2;
      return out;
    }
    const keys = arrays[`${id}/${layer}/key`], values = arrays[`${id}/${layer}/value`];
    const k = header.top_k;
    for (let i = 0; i < N; i++) for (let r = 0; r < k; r++) out[i * N + keys[i * k + r]] = values[i * k + r];
    return out;
  });
}

const UNITS = Math.max(...header.unit) + 1;
function unitInfo() {
  return memo("units", () => {
    const first = new Array(UNITS).fill(-1), size = new Array(UNITS).fill(0);
    header.unit.forEach((u, p) => { if (first[u] < 0) first[u] = p; size[u] += 1; });
    return {
      labels: header.unit_labels,
      segment: first.map((p) => header.segment[p]),
      special: first.map((p) => header.category[p] === "CLS" || header.category[p] === "SEP"),
      size,
    };
  });
}

// The map shown: {m, heads, labels, segment, special, values (display, 0..1), raw, max}
function shown(id, layer, level) {
  return memo(`shown/${id}/${layer}/${level}`, () => {
    const source = sourceOf(id), heads = source.heads;
    let raw = pieceMap(id, layer), m = N;
    let labels = header.tokens, segment = header.segment;
    let special = header.category.map((c) => c === "CLS" || c === "SEP");
    if (level === "words") {
      // attention to a word: sum over its pieces; from a word: mean over its pieces
      const units = unitInfo(), u = header.unit, out = new Float32Array(heads * UNITS * UNITS);
      for (let h = 0; h < heads; h++)
        for (let i = 0; i < N; i++)
          for (let j = 0; j < N; j++)
            out[(h * UNITS + u[i]) * UNITS + u[j]] += raw[(h * N + i) * N + j] / units.size[u[i]];
      raw = out; m = UNITS; ({ labels, segment, special } = units);
    }
    // the scale: the largest cell, or for maps with a residual the largest off the diagonal
    // (own parts above it are drawn at full opacity); the largest cell where none is off it
    let max = 0, offMax = 0;
    raw.forEach((v, x) => {
      if (v > max) max = v;
      if (v > offMax && Math.floor(x / m) % m !== x % m) offMax = v;
    });
    if (source.offDiagonal && offMax > 0) max = offMax;
    const norm = source.kind === "weight" ? 1 : max || 1;
    const values = raw.map((v) => Math.min(1, v / norm));
    return { m, heads, labels, segment, special, values, raw, max, norm };
  });
}

function passes(filter, segment, i, j) {
  if (filter === "all") return true;
  return segment[i] === "AB".indexOf(filter[0]) && segment[j] === "AB".indexOf(filter[1]);
}

// Edges drawn for one head: [i, j, value] with the top-k keys of each query above threshold
function edges(view, h, topk, threshold, filter) {
  const out = [], m = view.m;
  for (let i = 0; i < m; i++) {
    const row = [];
    for (let j = 0; j < m; j++) {
      const v = view.values[(h * m + i) * m + j];
      if (v >= threshold && v > 0 && passes(filter, view.segment, i, j)) row.push([i, j, v]);
    }
    row.sort((a, b) => b[2] - a[2]);
    for (const e of row.slice(0, topk)) out.push(e);
  }
  return out;
}

const headColour = (h, heads) => `hsl(${Math.round((h * 360) / Math.max(heads, 1))}, 70%, 42%)`;

// ---- head view --------------------------------------------------------------------------

function headLayout(view) {
  const rowH = view.m > 200 ? 11 : 16, labelW = Math.max(56, ...view.labels.map((t) => t.length * 7 + 10));
  const x1 = labelW + 4, x2 = labelW + 240, top = 24;
  return { rowH, x1, x2, width: x2 + labelW + 10, height: top + view.m * rowH + 8, y: (i) => top + i * rowH + rowH / 2 };
}

function renderHead() {
  const view = shown(state.source, state.layer, state.level), svg = $("head-svg"), at = headLayout(view);
  svg.setAttribute("width", at.width);
  svg.setAttribute("height", at.height);
  const labels = [
    `<text x="${at.x1 - 6}" y="14" text-anchor="end" font-weight="bold">query i</text>`,
    `<text x="${at.x2 + 6}" y="14" font-weight="bold">key j</text>`,
  ];
  view.labels.forEach((t, i) => {
    const cls = view.special[i] ? "special" : "", text = escapeXml(t);
    labels.push(`<text x="${at.x1 - 6}" y="${at.y(i) + 4}" text-anchor="end" class="${cls}" data-side="left" data-index="${i}">${text}</text>`);
    labels.push(`<text x="${at.x2 + 6}" y="${at.y(i) + 4}" class="${cls}" data-side="right" data-index="${i}">${text}</text>`);
  });
  svg.innerHTML = `<g id="head-lines"></g><g id="head-labels">${labels.join("")}</g>`;
  renderLines();
}

// The lines of the head view (all, or those of the hovered token): redrawn without the labels
function renderLines() {
  const view = shown(state.source, state.layer, state.level), at = headLayout(view), parts = [];
  const heads = view.heads === 1 ? [0] : [...state.heads].sort((a, b) => a - b);
  for (const h of heads) {
    const colour = view.heads === 1 ? "#335" : headColour(h, view.heads);
    for (const [i, j, v] of edges(view, h, state.topk, state.threshold, state.filter)) {
      if (state.focus && (state.focus.side === "left" ? i : j) !== state.focus.index) continue;
      parts.push(`<line x1="${at.x1}" y1="${at.y(i)}" x2="${at.x2}" y2="${at.y(j)}" stroke="${colour}" ` +
        `stroke-width="2" stroke-opacity="${v.toFixed(3)}" data-head="${h}"/>`);
    }
  }
  $("head-lines").innerHTML = parts.join("");
  for (const t of document.querySelectorAll("#head-labels text[data-side]")) {
    const focused = state.focus && state.focus.side === t.dataset.side && state.focus.index === +t.dataset.index;
    t.classList.toggle("focus", Boolean(focused));
  }
  $("head-svg").dataset.lines = parts.length;
}

function escapeXml(text) {
  return text.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

function renderHeadPicker() {
  // Swatches are made once and only restyled: a click that lands while the page re-renders
  // (e.g. after an input's change event) still reaches its swatch.
  const box = $("heads"), perHead = sourceOf(state.source).heads > 1;
  box.hidden = !perHead || state.view === "neuron";
  if (!box.children.length) {
    for (let h = 0; h < H; h++) {
      const swatch = document.createElement("div");
      swatch.className = "head";
      swatch.style.background = headColour(h, H);
      swatch.textContent = h + 1;
      swatch.title = `head ${h + 1}: click to toggle, double-click to show it alone`;
      swatch.dataset.head = h;
      box.appendChild(swatch);
    }
  }
  for (const swatch of box.children) swatch.classList.toggle("off", !state.heads.has(+swatch.dataset.head));
}

// ---- model view -------------------------------------------------------------------------

function renderModel() {
  const grid = $("model-grid"), heads = sourceOf(state.source).heads, size = 96;
  grid.innerHTML = "";
  grid.style.gridTemplateColumns = `repeat(${heads}, ${size + 4}px)`;
  const token = {};
  renderModel.token = token;
  let layer = 1;
  const drawLayer = () => {
    if (renderModel.token !== token || layer > L) return;
    const view = shown(state.source, layer, state.level);
    for (let h = 0; h < heads; h++) {
      const cell = document.createElement("div"), canvas = document.createElement("canvas");
      cell.className = "cell";
      cell.dataset.layer = layer;
      cell.dataset.head = h;
      canvas.width = canvas.height = size;
      const g = canvas.getContext("2d"), step = (size - 8) / Math.max(view.m - 1, 1);
      g.strokeStyle = heads === 1 ? "#335" : headColour(h, heads);
      for (const [i, j, v] of edges(view, h, Math.min(state.topk, 4), state.threshold, state.filter)) {
        g.globalAlpha = v;
        g.beginPath();
        g.moveTo(6, 4 + i * step);
        g.lineTo(size - 6, 4 + j * step);
        g.stroke();
      }
      const label = document.createElement("span");
      label.textContent = heads === 1 ? `layer ${layer}` : `L${layer} H${h + 1}`;
      cell.append(canvas, label);
      grid.appendChild(cell);
    }
    layer += 1;
    requestAnimationFrame(drawLayer);
  };
  drawLayer();
}

// ---- neuron view ------------------------------------------------------------------------

function diverging(v) {
  const t = Math.max(-1, Math.min(1, v)), a = Math.round(255 * (1 - Math.abs(t)));
  return t >= 0 ? `rgb(255, ${Math.round(140 + 115 * (1 - t))}, ${a})` : `rgb(${a}, ${Math.round(150 + 105 * (1 + t))}, 255)`;
}

function vectorCanvas(rows, cell, rowH) {
  const canvas = document.createElement("canvas");
  canvas.width = DH * cell;
  canvas.height = rows.length * rowH;
  const g = canvas.getContext("2d");
  let max = 0;
  for (const r of rows) for (const v of r) max = Math.max(max, Math.abs(v));
  rows.forEach((r, y) => r.forEach((v, e) => {
    g.fillStyle = diverging(v / (max || 1));
    g.fillRect(e * cell, y * rowH, cell - 1, rowH - 1);
  }));
  return canvas;
}

// Why the head attends (header.components, arrays why/{l}/key|pair|value): the top component
// pairs of the logit s_ij, stored for each query row's keys of largest weight; null elsewhere.
function whyPairs(layer, h, i, j) {
  const keys = arrays[`why/${layer}/key`];
  if (!keys) return null;
  const e = keys.length / (H * N), pair = arrays[`why/${layer}/pair`];
  const value = arrays[`why/${layer}/value`], p = value.length / (H * N * e);
  for (let a = 0; a < e; a++) {
    if (keys[(h * N + i) * e + a] !== j) continue;
    const at = ((h * N + i) * e + a) * p;
    return [...Array(p).keys()].map((b) => ({
      query: header.components[pair[(at + b) * 2]],
      key: header.components[pair[(at + b) * 2 + 1]],
      value: value[at + b],
    }));
  }
  return null;
}

function whyColumn(layer, h, i) {
  const box = document.createElement("div");
  box.id = "why";
  const j = state.whyKey;
  if (j === null) {
    box.textContent = header.components ? "click a key" : "not in this page (views scopes off)";
    return box;
  }
  const pairs = whyPairs(layer, h, i, j);
  if (!pairs) {
    box.textContent = `${header.tokens[j]}: stored for the keys of largest weight only`;
    return box;
  }
  const title = document.createElement("div");
  title.textContent = `${header.tokens[i]} → ${header.tokens[j]}`;
  box.appendChild(title);
  for (const { query, key, value } of pairs) {
    const row = document.createElement("div");
    row.className = "why-pair";
    row.dataset.query = query;
    row.dataset.key = key;
    row.dataset.value = value;
    row.textContent = `${query} × ${key}: ${value.toFixed(2)}`;
    box.appendChild(row);
  }
  return box;
}

function renderNeuron() {
  const box = $("neuron"), layer = state.layer, h = state.neuronHead, rowH = 14;
  const i = Math.min(state.query, N - 1), cell = DH > 48 ? 3 : 6;
  const q = arrays[`q/${layer}`], k = arrays[`k/${layer}`], a = alpha(layer);
  const qi = Array.from(q.subarray((h * N + i) * DH, (h * N + i + 1) * DH));
  const [first, last] = visibleKeys(layer, i);
  const keys = [...Array(last - first + 1).keys()].map((j) => j + first);
  const kRows = keys.map((j) => Array.from(k.subarray((h * N + j) * DH, (h * N + j + 1) * DH)));
  const prodRows = kRows.map((kj) => kj.map((v, e) => v * qi[e]));
  box.innerHTML = "";
  const column = (caption, content) => {
    const col = document.createElement("div");
    col.className = "neuron-col";
    const c = document.createElement("div");
    c.className = "caption";
    c.textContent = caption;
    col.append(c, content);
    box.appendChild(col);
    return col;
  };
  const queries = document.createElement("div");
  queries.className = "neuron-tokens";
  header.tokens.forEach((t, p) => {
    const row = document.createElement("div");
    row.className = "neuron-query" + (p === i ? " selected" : "");
    row.textContent = t;
    row.dataset.index = p;
    queries.appendChild(row);
  });
  column("query (click)", queries);
  const qBox = document.createElement("div");
  qBox.append(vectorCanvas([qi], cell, rowH));
  column(`q_i (${header.tokens[i]})`, qBox);
  const labels = document.createElement("div");
  labels.className = "neuron-tokens";
  for (const j of keys) {
    const row = document.createElement("div");
    const logit = score(layer, kRows[j - first].reduce((s, v, e) => s + v * qi[e], 0));
    row.className = "neuron-row" + (j === state.whyKey ? " selected" : "");
    row.dataset.key = j;
    row.dataset.score = logit;
    row.dataset.alpha = a[(h * N + i) * N + j];
    for (const text of [header.tokens[j], logit.toFixed(2), a[(h * N + i) * N + j].toFixed(3)]) {
      const span = document.createElement("span");
      span.textContent = text;
      row.appendChild(span);
    }
    labels.appendChild(row);
  }
  column("key j \u00b7 q\u00b7k \u00d7 scale \u00b7 softmax", labels);
  column("k_j", vectorCanvas(kRows, cell, rowH));
  column("q \u2299 k_j", vectorCanvas(prodRows, cell, rowH));
  const bars = document.createElement("canvas");
  bars.width = 120;
  bars.height = keys.length * rowH;
  const g = bars.getContext("2d");
  g.fillStyle = "#335";
  for (const j of keys) g.fillRect(0, (j - first) * rowH + 2, 120 * a[(h * N + i) * N + j], rowH - 4);
  column("softmax", bars);
  column("why: top query \u00d7 key component terms of s_ij", whyColumn(layer, h, i));
}

// ---- prediction -------------------------------------------------------------------------

// Each input token's part of the prediction at one position (header.prediction, arrays
// prediction/logit and prediction/contrast [P, N]), shaded red > 0 > blue by |part| / max.
function renderPrediction() {
  const p = header.prediction;
  if (!p.positions) {
    $("prediction-caption").textContent = `Prediction: not available (${p.reason}).`;
    $("prediction").querySelectorAll("label").forEach((l) => { l.hidden = true; });
    return;
  }
  const at = state.predictionIndex, contrast = state.predictionMeasure === "contrast";
  const parts = arrays[contrast ? "prediction/contrast" : "prediction/logit"].subarray(at * N, (at + 1) * N);
  const visible = header.causal ? p.positions[at] + 1 : N;
  let max = 0;
  for (let j = 0; j < visible; j++) max = Math.max(max, Math.abs(parts[j]));
  const row = $("prediction-row");
  row.innerHTML = "";
  for (let j = 0; j < visible; j++) {
    const span = document.createElement("span");
    span.textContent = header.tokens[j];
    span.style.background = diverging(parts[j] / (max || 1));
    span.dataset.index = j;
    span.dataset.value = parts[j];
    span.title = `${header.tokens[j]}: ${parts[j].toFixed(3)}`;
    if (j === p.positions[at]) span.classList.add("predicted");
    row.appendChild(span);
  }
  const total = contrast ? p.contrast.logit[at] : p.logit[at], bias = contrast ? p.contrast.bias[at] : p.bias[at];
  const what = contrast ? `logit(${p.contrast.target}) − logit(${p.contrast.foil})` : `logit of ${p.predicted[at]}`;
  $("prediction-caption").textContent = `${what} = ${total.toFixed(3)}: each input token's part ` +
    `(red > 0 > blue, largest |part| ${max.toPrecision(3)}), plus the bias part ${bias.toFixed(3)}.`;
}

function wirePrediction() {
  const p = header.prediction;
  if (!p.positions) return;
  const where = p.kind === "masked" ? "masked piece at" : "next piece after";
  p.positions.forEach((position, at) =>
    $("prediction-position").add(new Option(`${where} ${position} (${p.token[at]}): ${p.predicted[at]}`, `${at}`)));
  $("prediction-measure").add(new Option("predicted logit", "logit"));
  if (p.contrast) $("prediction-measure").add(new Option(`${p.contrast.target} − ${p.contrast.foil}`, "contrast"));
  $("prediction-position").addEventListener("change", (e) => { state.predictionIndex = +e.target.value; renderPrediction(); });
  $("prediction-measure").addEventListener("change", (e) => { state.predictionMeasure = e.target.value; renderPrediction(); });
}

// ---- page -------------------------------------------------------------------------------

function legend() {
  if (state.view === "neuron") {
    $("legend").textContent = `Layer ${state.layer}, head ${state.neuronHead + 1}, query ${header.tokens[Math.min(state.query, N - 1)]}: ` +
      "q_i and each key's k_j (orange > 0 > blue), their element-wise product, the score q_i\u00b7k_j \u00d7 scale and its softmax over the keys the query sees." +
      (header.rotary ? " q and k are shown after the rotation by position." : "") +
      (header.kv_heads < H ? ` Keys: key/value head ${Math.floor(state.neuronHead / (H / header.kv_heads)) + 1} of ${header.kv_heads}, shared by ${H / header.kv_heads} query heads.` : "");
    return;
  }
  const source = sourceOf(state.source), view = shown(state.source, state.layer, state.level);
  const scale = source.kind === "weight" ? "opacity = value"
    : source.offDiagonal ? `opacity = value / ${view.max.toPrecision(3)} (largest off the diagonal of this layer; a token's own part, which holds its residual, is capped at full opacity)`
    : `opacity = value / ${view.max.toPrecision(3)} (largest of this layer)`;
  const stored = source.sparse ? `; stored: the top ${header.top_k} keys of each query row` : "";
  const words = state.level === "words" ? "; words: sum over a word's key pieces, mean over its query pieces" : "";
  $("legend").textContent = `${source.label}, layer ${state.layer}: ${scale}${stored}${words}.`;
}

function render() {
  document.body.className = `view-${state.view}`;
  for (const b of document.querySelectorAll(".tabs button")) b.classList.toggle("active", b.dataset.view === state.view);
  $("head-view").hidden = state.view !== "head";
  $("model-view").hidden = state.view !== "model";
  $("neuron-view").hidden = state.view !== "neuron";
  $("save-svg").disabled = state.view !== "head";
  renderHeadPicker();
  legend();
  if (state.view === "head") renderHead();
  else if (state.view === "model") renderModel();
  else renderNeuron();
}

function download(blob, name) {
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

function svgText() {
  const svg = $("head-svg").cloneNode(true);
  svg.setAttribute("xmlns", SVG_NS);
  svg.insertAdjacentHTML("afterbegin", "<style>text{font:12px sans-serif}.special{fill:#777}</style>");
  return new XMLSerializer().serializeToString(svg);
}

function fileStem() {
  return `attnscope-seq${header.sequence}-${state.view}-${state.source}-L${state.layer}`;
}

function savePng() {
  const done = (canvas) => canvas.toBlob((blob) => download(blob, `${fileStem()}.png`));
  if (state.view === "head") {
    const svg = $("head-svg"), image = new Image();
    image.onload = () => {
      const canvas = document.createElement("canvas");
      canvas.width = svg.width.baseVal.value;
      canvas.height = svg.height.baseVal.value;
      const g = canvas.getContext("2d");
      g.fillStyle = "#fff";
      g.fillRect(0, 0, canvas.width, canvas.height);
      g.drawImage(image, 0, 0);
      done(canvas);
    };
    image.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(svgText());
    return;
  }
  const parts = [...document.querySelectorAll(state.view === "model" ? "#model-grid canvas" : "#neuron canvas")];
  const columns = state.view === "model" ? sourceOf(state.source).heads : parts.length;
  const w = Math.max(...parts.map((c) => c.width)) + 8, h = Math.max(...parts.map((c) => c.height)) + 8;
  const canvas = document.createElement("canvas");
  canvas.width = columns * w;
  canvas.height = Math.ceil(parts.length / columns) * h;
  const g = canvas.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, canvas.width, canvas.height);
  parts.forEach((c, p) => g.drawImage(c, (p % columns) * w + 4, Math.floor(p / columns) * h + 4));
  done(canvas);
}

function wire() {
  for (const s of SOURCES) $("source").add(new Option(s.label, s.id));
  for (let l = 1; l <= L; l++) $("layer").add(new Option(`${l}`, `${l}`));
  for (let h = 0; h < H; h++) $("neuron-head").add(new Option(`${h + 1}`, `${h}`));
  $("topk").max = Math.max(header.top_k, 16);
  const on = (id, event, f) => $(id).addEventListener(event, (e) => { f(e); render(); });
  on("source", "change", (e) => { state.source = e.target.value; });
  on("layer", "change", (e) => { state.layer = +e.target.value; });
  on("level", "change", (e) => { state.level = e.target.value; state.focus = null; });
  on("filter", "change", (e) => { state.filter = e.target.value; });
  on("topk", "input", (e) => { state.topk = +e.target.value; $("topk-value").textContent = e.target.value; });
  on("threshold", "change", (e) => { state.threshold = +e.target.value; });
  on("neuron-head", "change", (e) => { state.neuronHead = +e.target.value; });
  for (const b of document.querySelectorAll(".tabs button"))
    b.addEventListener("click", () => { state.view = b.dataset.view; render(); });
  $("heads").addEventListener("click", (e) => {
    const h = e.target.dataset.head;
    if (h === undefined) return;
    state.heads.has(+h) ? state.heads.delete(+h) : state.heads.add(+h);
    render();
  });
  $("heads").addEventListener("dblclick", (e) => {
    if (e.target.dataset.head === undefined) return;
    state.heads = new Set([+e.target.dataset.head]);
    render();
  });
  $("head-svg").addEventListener("mouseover", (e) => {
    const t = e.target.closest("text[data-side]");
    if (!t || (state.focus && state.focus.side === t.dataset.side && state.focus.index === +t.dataset.index)) return;
    state.focus = { side: t.dataset.side, index: +t.dataset.index };
    renderLines();
  });
  $("head-svg").addEventListener("mouseleave", () => { state.focus = null; renderLines(); });
  $("model-grid").addEventListener("click", (e) => {
    const cell = e.target.closest(".cell");
    if (!cell) return;
    state.layer = +cell.dataset.layer;
    $("layer").value = `${state.layer}`;
    if (sourceOf(state.source).heads > 1) state.heads = new Set([+cell.dataset.head]);
    state.view = "head";
    state.focus = null;
    render();
  });
  $("neuron").addEventListener("click", (e) => {
    const row = e.target.closest(".neuron-query");
    const key = e.target.closest(".neuron-row");
    if (row) {
      state.query = +row.dataset.index;
      state.whyKey = null;
    } else if (key) state.whyKey = +key.dataset.key;
    else return;
    render();
  });
  $("save-svg").addEventListener("click", () => download(new Blob([svgText()], { type: "image/svg+xml" }), `${fileStem()}.svg`));
  $("save-png").addEventListener("click", savePng);
}

async function main() {
  arrays = await inflate(header.arrays, document.getElementById("attnscope-data").textContent);
  const error = header.alpha_max_error.toExponential(1);
  $("info").textContent = `${header.model_type} \u00b7 sequence ${header.sequence} \u00b7 ${N} pieces \u00b7 ` +
    `${L} layers \u00d7 ${H} heads \u00b7 weights recomputed in the page from float16 q, k (largest |\u0394\u03b1| ${error})`;
  wire();
  wirePrediction();
  renderPrediction();
  render();
  window.attnscope.firstPaintMs = performance.now();
  document.body.dataset.ready = "1";
}

window.attnscope = { header, state, render, shown, pieceMap, alpha, get arrays() { return arrays; } };
main().catch((error) => {
  document.body.dataset.error = String(error);
  throw error;
});
