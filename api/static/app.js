// Neighbour browser: pick a store and an item, see its label and its nearest neighbours (API v1 only).
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { stores: [], shown: 0 };

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof body.detail === "string" ? body.detail
      : Array.isArray(body.detail) ? body.detail.map((e) => e.msg).join("; ") : response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return body;
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
    const name = pose.joints ? pose.joints[j] : "";
    return name.startsWith("r_") ? "right" : name.startsWith("l_") ? "left" : "center";
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
    box.append(el("pre", { class: "meta" }, JSON.stringify(label.values).slice(0, 400)));
  }
  return box;
}

async function labelOf(store, index) {
  try {
    return drawLabel(await api(`/v1/stores/${encodeURIComponent(store)}/items/${index}/label`));
  } catch (error) {
    return el("p", { class: "meta" }, `no label: ${error.message}`);
  }
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

function describe(store) {
  const info = state.stores.find((s) => s.name === store);
  if (!info) return "";
  const show = (v) => (v !== null && typeof v === "object" ? JSON.stringify(v) : String(v));
  const params = Object.entries(info.params || {}).map(([k, v]) => `${k}=${show(v)}`).join(", ");
  return `${info.dataset} · ${info.kind} (${params}) · ${info.n_items} items · k=${info.k}` +
    ` · ${info.has_dense ? "dense matrix + kNN lists" : "kNN lists only"}`;
}

async function show(store, item, k) {
  showError("");
  const token = ++state.shown; // a newer call wins: answers to older ones are dropped
  const info = state.stores.find((s) => s.name === store);
  if (info) {
    $("item").max = info.n_items - 1;
    $("k").max = info.k;
    k = Math.min(k, info.k);
    $("k").value = k;
  }
  $("store-info").textContent = describe(store);
  history.replaceState(null, "", `/ui?store=${encodeURIComponent(store)}&item=${item}&k=${k}`);
  let result;
  try {
    result = await api(`/v1/stores/${encodeURIComponent(store)}/items/${item}/neighbors?k=${k}`);
  } catch (error) {
    if (token !== state.shown) return;
    showError(error.message);
    $("anchor").replaceChildren();
    $("neighbors").replaceChildren();
    return;
  }
  const anchor = el("div", { class: "card", "data-index": result.index, "data-id": result.id });
  anchor.append(el("h2", {}, `item ${result.index}`), el("div", { class: "meta" }, result.id));
  anchor.append(await labelOf(store, result.index));
  if (token !== state.shown) return;
  $("anchor").replaceChildren(anchor);
  $("neighbors-title").textContent = `${result.indices.length} nearest neighbours of item ${result.index}`;
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

function go(store, item) {
  $("store").value = store;
  $("item").value = item;
  return show(store, item, Number($("k").value));
}

function current() {
  return { store: $("store").value, item: Number($("item").value), k: Number($("k").value) };
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
  $("store").addEventListener("change", () => go($("store").value, 0));
  const step = (delta) => () => {
    const { store, item } = current();
    const info = state.stores.find((s) => s.name === store);
    go(store, (item + delta + info.n_items) % info.n_items);
  };
  $("prev").addEventListener("click", step(-1));
  $("next").addEventListener("click", step(1));
  $("random").addEventListener("click", () => {
    const info = state.stores.find((s) => s.name === $("store").value);
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
  if (available.length) await go(asked || available[0], Number(params.get("item") || 0));
  document.body.dataset.ready = "true";
}

main();
