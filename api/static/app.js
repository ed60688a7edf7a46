// Neighbour browser: pick a store and an item, see its label and its nearest neighbours; search a store by a new
// label (POST /search), find an item by its id (GET /ids). API v1 only.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { stores: [], shown: 0, ids: {}, label: null, pose: null };
//: how the search box reads what is typed, by kind; any other kind takes the label's JSON form as typed
const QUERY_FORMS = {
  caption_wmd: { hint: "search by captions, one per line", placeholder: "a dog catches a frisbee\na brown dog on the grass" },
  vectors: { hint: "search by a vector: its numbers", placeholder: "0.5 1.25 -3" },
  sentence_relevance: { hint: "search by a sentence, typed as it is: scored by the store's own model",
    placeholder: "A man rides a horse along the beach." },
};
//: a pose store's search box by its normalisation (params.labels.normalization): a store of image pixels takes the
//: joints as they are; a normalised store takes raw pixels with what its normalisation needs of the person, which
//: the service normalises as the store's poses were (joints already normalised are typed as a list, as the item's)
const POSE_FORMS = {
  none: { hint: "search by a pose: its joints in image pixels, each [x, y] or null (JSON)",
    placeholder: "[[317, 412], [318, 299], null, ...]" },
  center_scale: { hint: "search by a pose in image pixels with the person's centre and scale (JSON); or its joints normalised as the store's, a list",
    placeholder: '{"joints": [[317, 412], [318, 299], null, ...], "center": [316, 246], "scale": 2.2}' },
  head: { hint: "search by a pose in image pixels with the person's centre and head size (JSON); or its joints normalised as the store's, a list",
    placeholder: '{"joints": [[317, 412], [318, 299], null, ...], "center": [316, 246], "head": 44}' },
  box: { hint: "search by a pose in image pixels with the person's box [x, y, w, h] (JSON); or its joints normalised as the store's, a list",
    placeholder: '{"joints": [[317, 412], [318, 299], null, ...], "box": [270, 95, 145, 325]}' },
};
//: pose limbs as drawn (style.css colours them by class)
const LIMBS = [["right", "right limbs"], ["left", "left limbs"], ["center", "spine, neck and head"]];

async function api(path, body) {
  const init = { headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof answer.detail === "string" ? answer.detail
      : Array.isArray(answer.detail) ? answer.detail.map((e) => e.msg).join("; ") : response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return answer;
}

function el(tag, attrs = {}, ...children) {
  const node = ["svg", "line", "circle", "title"].includes(tag)
    ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) node.append(child);
  return node;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

const storeInfo = (store) => state.stores.find((s) => s.name === store);
const storePath = (store) => `/v1/stores/${encodeURIComponent(store)}`;

// A pose as an SVG skeleton, scaled to fit; image coordinates (y down).
function drawPose(pose) {
  const svg = el("svg", { class: "pose", role: "img" });
  const points = pose.xy.filter((p) => p !== null);
  if (!points.length) return svg;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const minX = Math.min(...xs), maxX = Math.max(...xs), minY = Math.min(...ys), maxY = Math.max(...ys);
  const span = Math.max(maxX - minX, maxY - minY, 1e-9), pad = 0.08 * span;
  const cx = (minX + maxX) / 2, cy = (minY + maxY) / 2, half = span / 2 + pad;
  svg.setAttribute("viewBox", `${cx - half} ${cy - half} ${2 * half} ${2 * half}`);
  const unit = (2 * half) / 100;
  const side = (j) => {
    if (pose.sides) return pose.sides[j];
    const name = pose.joints ? pose.joints[j] : "";
    return /^(r|right)[_\-. ]/i.test(name) ? "right" : /^(l|left)[_\-. ]/i.test(name) ? "left" : "center";
  };
  for (const [a, b] of pose.edges) {
    const p = pose.xy[a], q = pose.xy[b];
    if (!p || !q) continue;
    const cls = side(a) === side(b) ? side(a) : side(a) === "center" ? side(b) : side(a);
    svg.append(el("line", { class: `bone ${cls}`, x1: p[0], y1: p[1], x2: q[0], y2: q[1],
      "stroke-width": 3 * unit }));
  }
  pose.xy.forEach((p, j) => {
    if (!p) return;
    const circle = el("circle", { class: pose.visible[j] ? "joint" : "joint hidden", cx: p[0], cy: p[1],
      r: 2.2 * unit, "stroke-width": 1.2 * unit });
    circle.append(el("title", {}, pose.joints ? pose.joints[j] : `joint ${j}`));
    svg.append(circle);
  });
  return svg;
}

function drawLabel(label) {
  const box = el("div", { class: "label" });
  if (label.pose) box.append(drawPose(label.pose));
  for (const src of label.images || []) box.append(el("img", { class: "map", src, alt: `label of ${label.id}` }));
  if (label.texts) box.append(el("ul", { class: "texts" }, ...label.texts.map((t) => el("li", {}, t))));
  if (label.values && !label.pose && !label.images) {
    box.append(el("pre", { class: "meta values" }, formatValues(label.values)));
  }
  return box;
}

// A label's numbers in a few words: a long vector as its length, its first numbers and its last, each to 4
// significant digits, so that a 128-d vector fits its card.
function formatValues(values) {
  const short = (x) => (typeof x !== "number" ? JSON.stringify(x) : Number.isInteger(x) ? String(x) : x.toPrecision(4));
  return Object.entries(values).map(([name, value]) => {
    const flat = [].concat(value).flat(Infinity);
    const shown = flat.length > 8
      ? `${flat.length} values: ${flat.slice(0, 6).map(short).join(", ")}, …, ${short(flat[flat.length - 1])}`
      : flat.map(short).join(", ");
    return `${name}: ${shown}`;
  }).join("\n");
}

async function fetchLabel(store, index) {
  const label = await api(`${storePath(store)}/items/${index}/label`);
  if (label.pose) state.pose = { joints: label.pose.joints, edges: label.pose.edges, sides: label.pose.sides };
  showLegend(label);
  return label;
}

async function labelOf(store, index) {
  try {
    return drawLabel(await fetchLabel(store, index));
  } catch (error) {
    return el("p", { class: "meta" }, `no label: ${error.message}`);
  }
}

// The legend of what the labels are drawn with: a pose's limbs, a map's surface classes.
function showLegend(label) {
  const box = $("legend");
  if (label.pose) {
    const items = LIMBS.map(([cls, name]) => {
      const swatch = el("svg", { class: "swatch", viewBox: "0 0 24 12" });
      swatch.append(el("line", { class: `bone ${cls}`, x1: 2, y1: 6, x2: 22, y2: 6, "stroke-width": 4 }));
      return el("span", { class: "legend-item", "data-limb": cls }, swatch, name);
    });
    const joint = (cls, name) => {
      const swatch = el("svg", { class: "swatch", viewBox: "0 0 12 12" });
      swatch.append(el("circle", { class: cls, cx: 6, cy: 6, r: 4, "stroke-width": 1.5 }));
      return el("span", { class: "legend-item" }, swatch, name);
    };
    box.replaceChildren(el("b", {}, "limbs"), ...items, joint("joint", "joint"), joint("joint hidden", "occluded joint"));
  } else if (label.legend) {
    const items = label.legend.map((entry) => el("span", { class: "legend-item", "data-value": entry.value,
      "data-color": entry.color }, el("i", { class: "chip", style: `background:${entry.color}` }), entry.name));
    box.replaceChildren(el("b", {}, "surfaces"), ...items);
  } else {
    box.replaceChildren();
  }
  box.hidden = !box.childElementCount;
}

async function loadStores() {
  const { stores } = await api("/v1/stores");
  state.stores = stores;
  const select = $("store");
  select.replaceChildren();
  for (const s of stores) {
    const text = s.available ? `${s.name} (${s.kind}, ${s.n_items} items)` : `${s.name} (unavailable)`;
    const option = el("option", { value: s.name }, text);
    if (!s.available) option.disabled = true;
    select.append(option);
  }
  if (!stores.some((s) => s.available)) showError("no store is available in this service's stores folder");
}

// The store's card: what it is (dataset, kind, size, k, dense or not) and what its distance means, in words;
// the raw parameters behind a "details" toggle.
function describe(store) {
  const info = storeInfo(store);
  if (!info) return [];
  const show = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v));
  const summary = el("div", { class: "summary" }, el("b", {}, info.dataset), ` · ${KIND_NAMES[info.kind] || info.kind}` +
    ` · ${info.n_items.toLocaleString("en")} items · k = ${info.k}` +
    ` · ${info.has_dense ? "every pair stored (dense matrix + kNN lists)" : "kNN lists only"}`);
  const meaning = el("div", { class: "meaning" }, `distance: ${info.distance || `the ${info.kind} distance`}`);
  const params = el("ul", {}, ...Object.entries(info.params || {}).map(([k, v]) => el("li", {}, `${k} = ${show(v)}`)));
  const details = el("details", {}, el("summary", {}, "details"), params,
    el("p", {}, `kind ${info.kind} · made by labeldist ${info.engine_version} on ${info.created}`));
  return [summary, meaning, details];
}

//: each built-in kind in words; a plugin's kind is shown by its name
const KIND_NAMES = {
  pose: "human poses",
  layout_miou: "room layouts",
  caption_wmd: "images by their captions",
  sentence_relevance: "sentences",
  vectors: "vectors",
};

// The store's settings of the search box: its hint and placeholder by kind.
function prepareSearch(store) {
  const info = storeInfo(store);
  const unsearchable = info && info.searchable === false;
  const form = unsearchable ? { hint: notSearchable(info), placeholder: "" }
    : info && info.kind === "pose" ? poseForm(info)
    : QUERY_FORMS[info && info.kind] || { hint: "search by a label (its JSON form)", placeholder: "" };
  $("query-hint").textContent = form.hint;
  $("query").placeholder = form.placeholder;
  $("query").disabled = $("search").disabled = Boolean(unsearchable);
  $("search-form").dataset.kind = info ? info.kind : "";
  $("search-form").dataset.searchable = unsearchable ? "false" : "true";
}

// Why the search box of a store is off: the service says which stores can be searched (StoreInfo.searchable).
function notSearchable(info) {
  return `a ${info.kind} store cannot be searched by a new label (its kind reads no label from what is typed): ` +
    "browse its items, or find one by id";
}

function poseForm(info) {
  const labels = (info.params && info.params.labels) || {};
  return POSE_FORMS[labels.normalization] || POSE_FORMS.none;
}

// One card per item of an answer ({indices, ids, distances}), as the neighbour list shows them.
async function showItems(store, result, title, token) {
  $("neighbors-title").textContent = title;
  const cards = result.indices.map((index, rank) => {
    const distance = result.distances[rank];
    const card = el("li", { class: "card neighbor", "data-index": index, "data-id": result.ids[rank],
      "data-distance": distance === null ? "Infinity" : String(distance) });
    card.append(el("div", { class: "meta" }, el("b", {}, `#${rank + 1} · item ${index}`)));
    card.append(el("div", { class: "dist" }, `d = ${distance === null ? "∞" : distance.toPrecision(6)}`));
    card.append(el("div", { class: "meta" }, result.ids[rank]));
    card.addEventListener("click", () => go(store, index));
    return card;
  });
  $("neighbors").replaceChildren(...cards);
  const labels = await Promise.all(result.indices.map((index) => labelOf(store, index)));
  if (token !== state.shown) return;
  labels.forEach((label, i) => cards[i].insertBefore(label, cards[i].children[2]));
}

function clearItems() {
  $("anchor").replaceChildren();
  $("neighbors").replaceChildren();
}

async function show(store, item, k) {
  showError("");
  const token = ++state.shown; // a newer call wins: answers to older ones are dropped
  const info = storeInfo(store);
  if (info) {
    $("item").max = info.n_items - 1;
    $("k").max = info.k;
    k = Math.min(k, info.k);
    $("k").value = k;
  }
  $("store-info").replaceChildren(...describe(store));
  prepareSearch(store);
  history.replaceState(null, "", `/ui?store=${encodeURIComponent(store)}&item=${item}&k=${k}`);
  let result;
  try {
    result = await api(`${storePath(store)}/items/${item}/neighbors?k=${k}`);
  } catch (error) {
    if (token !== state.shown) return;
    showError(error.message);
    clearItems();
    return;
  }
  const anchor = el("div", { class: "card", "data-index": result.index, "data-id": result.id });
  anchor.append(el("h2", {}, `item ${result.index}`), el("div", { class: "meta" }, result.id));
  let label;
  try {
    label = await fetchLabel(store, result.index);
    anchor.append(drawLabel(label));
  } catch (error) {
    anchor.append(el("p", { class: "meta" }, `no label: ${error.message}`));
  }
  if (token !== state.shown) return;
  state.label = label || null;
  $("anchor").replaceChildren(anchor);
  $("neighbors").dataset.mode = "neighbors";
  await showItems(store, result, `${result.indices.length} nearest neighbours of item ${result.index}`, token);
}

function go(store, item) {
  $("store").value = store;
  $("item").value = item;
  return show(store, item, Number($("k").value));
}

function current() {
  return { store: $("store").value, item: Number($("item").value), k: Number($("k").value) };
}

// ------------------------------------------------------------------------------ search by a new label
// What is typed, as the label's JSON form: captions one per line, a vector's numbers, else JSON.
function parseQuery(kind, text) {
  if (kind === "caption_wmd") return text.split("\n").map((line) => line.trim()).filter(Boolean);
  if (kind === "sentence_relevance") return text.trim().replace(/\s*\n\s*/g, " "); // one sentence
  const trimmed = text.trim();
  if (kind === "vectors" && !trimmed.startsWith("[")) {
    const parts = trimmed.split(/[\s,;]+/).filter(Boolean);
    const bad = parts.find((p) => !Number.isFinite(Number(p)));
    if (bad !== undefined) throw new Error(`"${bad}" is not a number: type the vector's numbers`);
    return parts.map(Number);
  }
  try {
    return JSON.parse(trimmed);
  } catch (error) {
    throw new Error(`the label of a ${kind} store is typed as JSON: ${error.message}`);
  }
}

// What the query was, drawn like an item's label.
function drawQuery(kind, label) {
  if (kind === "caption_wmd") return drawLabel({ texts: label });
  if (kind === "sentence_relevance") return drawLabel({ texts: [label] });
  if (kind === "pose" && state.pose) {
    let xy = label && !Array.isArray(label) && "joints" in label ? label.joints : label; // raw pixels: drawn as typed
    if (xy && !Array.isArray(xy) && typeof xy === "object") xy = state.pose.joints.map((name) => xy[name] || null);
    if (Array.isArray(xy)) return drawLabel({ pose: { ...state.pose, xy, visible: xy.map(() => true) } });
  }
  return drawLabel({ values: { label } });
}

async function search(store, text, k) {
  showError("");
  const token = ++state.shown;
  const info = storeInfo(store);
  const kind = info ? info.kind : "";
  prepareSearch(store);
  $("store-info").replaceChildren(...describe(store));
  $("query").value = text;
  history.replaceState(null, "", `/ui?store=${encodeURIComponent(store)}&search=${encodeURIComponent(text)}&k=${k}`);
  let label, result;
  if (info && info.searchable === false) {
    showError(`search: ${notSearchable(info)}`);
    clearItems();
    return;
  }
  try {
    label = parseQuery(kind, text);
    if (info) k = Math.min(k, info.n_items);
    result = await api(`${storePath(store)}/search`, { label, k });
  } catch (error) {
    if (token !== state.shown) return;
    showError(`search: ${error.message}`);
    clearItems();
    return;
  }
  if (kind === "pose" && !state.pose && result.indices.length) { // the skeleton's joints and bones, to draw the query
    await fetchLabel(store, result.indices[0]).catch(() => null);
  }
  if (token !== state.shown) return;
  const query = el("div", { class: "card query", "data-computed": result.computed });
  const n = info ? info.n_items : result.computed;
  query.append(el("h2", {}, "search"), el("div", { class: "meta" }, result.computed < n
    ? `${result.computed} of ${n} distances computed (the rest ruled out by a lower bound)`
    : `all ${n} distances computed`));
  query.append(drawQuery(kind, label));
  $("anchor").replaceChildren(query);
  $("neighbors").dataset.mode = "search";
  await showItems(store, result, `${result.indices.length} nearest items of the search`, token);
}

// The current item's label in the search box's form, to search by it or an edit of it.
function fillQuery() {
  const label = state.label;
  if (!label) return;
  if (label.pose) $("query").value = JSON.stringify(label.pose.xy);
  else if (label.texts) $("query").value = label.texts.join("\n");
  else if (label.values && label.values.values) $("query").value = [].concat(label.values.values).join(" ");
  else if (label.values) $("query").value = JSON.stringify(Object.values(label.values)[0]);
  $("query").focus();
}

// ------------------------------------------------------------------------------ an item by its id
async function idsOf(store) {
  if (!state.ids[store]) state.ids[store] = (await api(`${storePath(store)}/ids`)).ids;
  return state.ids[store];
}

async function lookup(store, text) {
  showError("");
  const wanted = text.trim();
  if (!wanted) {
    showError("type an item id to find");
    return;
  }
  let ids;
  try {
    ids = await idsOf(store);
  } catch (error) {
    showError(`cannot read the ids of ${store}: ${error.message}`);
    return;
  }
  let index = ids.indexOf(wanted);
  if (index < 0) {
    const matches = [];
    ids.forEach((id, i) => { if (id.includes(wanted)) matches.push(i); });
    if (matches.length !== 1) {
      const some = matches.slice(0, 5).map((i) => ids[i]).join(", ");
      showError(matches.length ? `${matches.length} ids of ${store} contain "${wanted}" (${some}${matches.length > 5 ? ", ..." : ""}): type one whole`
        : `no item of ${store} has the id "${wanted}"`);
      return;
    }
    index = matches[0];
  }
  await go(store, index);
  $("anchor").firstChild?.classList.add("found");
}

async function main() {
  try {
    await loadStores();
  } catch (error) {
    showError(`cannot list the stores: ${error.message}`);
    return;
  }
  $("controls").addEventListener("submit", (event) => {
    event.preventDefault();
    const { store, item, k } = current();
    show(store, item, k);
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    return (state.pending = search($("store").value, $("query").value, Number($("k").value)));
  });
  $("query").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("search-form").requestSubmit();
  });
  $("use-item").addEventListener("click", fillQuery);
  $("lookup-form").addEventListener("submit", (event) => {
    event.preventDefault();
    return (state.pending = lookup($("store").value, $("lookup").value));
  });
  $("store").addEventListener("change", () => go($("store").value, 0));
  const step = (delta) => () => {
    const { store, item } = current();
    const info = storeInfo(store);
    go(store, (item + delta + info.n_items) % info.n_items);
  };
  $("prev").addEventListener("click", step(-1));
  $("next").addEventListener("click", step(1));
  $("random").addEventListener("click", () => {
    const info = storeInfo($("store").value);
    go(info.name, Math.floor(Math.random() * info.n_items));
  });
  const params = new URLSearchParams(location.search);
  if (params.has("k")) $("k").value = params.get("k");
  const available = state.stores.filter((s) => s.available).map((s) => s.name);
  const asked = params.get("store");
  if (asked && !available.includes(asked)) {
    const known = state.stores.some((s) => s.name === asked);
    showError(`store ${asked} is ${known ? "not available (not complete yet)" : "unknown"}; choose another`);
    document.body.dataset.ready = "true";
    return;
  }
  const store = asked || available[0];
  if (store && params.has("search")) { // ?search=TEXT: typed into the search box and submitted, as a user would
    $("store").value = store;
    $("query").value = params.get("search");
    $("search-form").requestSubmit();
    await state.pending;
  } else if (store && params.has("id")) { // ?id=ID: the same with the id box
    $("store").value = store;
    $("lookup").value = params.get("id");
    $("lookup-form").requestSubmit();
    await state.pending;
  } else if (store) {
    await go(store, Number(params.get("item") || 0));
  }
  document.body.dataset.ready = "true";
}

main();
