"use strict";
// The atlas page: a layer x head grid coloured by each head's first role, a role filter, and
// a head's card on click (its scores, roles, the circuit edges as links to the upstream
// heads' cards, small attention patterns). Everything it shows is in #atlas-data.
(function () {
  const data = JSON.parse(document.getElementById("atlas-data").textContent);
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e", "#393b79", "#637939", "#843c39", "#7b4173"];
  const colour = {};
  data.roles.forEach((r, i) => { colour[r] = PALETTE[i % PALETTE.length]; });
  colour.none = "#ddd";
  const key = (l, h) => `L${l}H${h}`;
  const byKey = {};
  data.heads.forEach((row) => { byKey[key(row.layer, row.head)] = row; });
  const rolesOf = (row) => String(row.roles).split(",");
  const fmt = (v) => (typeof v === "number" ? Number(v.toPrecision(4)).toString() : String(v));
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => e.setAttribute(k, v));
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // header: in-context loss, links
  if (data.loss.length && data.loss[0].loss_first !== undefined) {
    const l = data.loss[0];
    document.getElementById("loss").textContent =
      `in-context loss (repeated corpus): first copy ${fmt(l.loss_first)}, second copy ` +
      `${fmt(l.loss_second)}, drop ${fmt(l.loss_drop)} nats`;
  }
  const links = document.getElementById("links");
  data.links.forEach((link) => {
    links.appendChild(el("a", { href: link.href }, link.label));
    links.appendChild(document.createTextNode(" "));
  });

  // legend and filter
  const filter = document.getElementById("role-filter");
  const legend = document.getElementById("legend");
  [...data.roles, "none"].forEach((r) => {
    filter.appendChild(el("option", { value: r }, r));
    const s = el("span", { class: "role", style: `background:${colour[r]}` }, r);
    legend.appendChild(s);
  });

  // grid
  const layers = [...new Set(data.heads.map((r) => r.layer))].sort((a, b) => a - b);
  const heads = [...new Set(data.heads.map((r) => r.head))].sort((a, b) => a - b);
  const table = el("table");
  const top = el("tr");
  top.appendChild(el("th"));
  heads.forEach((h) => top.appendChild(el("th", {}, `H${h}`)));
  table.appendChild(top);
  layers.forEach((l) => {
    const tr = el("tr");
    tr.appendChild(el("th", {}, `L${l}`));
    heads.forEach((h) => {
      const row = byKey[key(l, h)];
      const roles = row ? rolesOf(row) : ["none"];
      const td = el("td", { id: `cell-${key(l, h)}`, "data-layer": l, "data-head": h,
        "data-roles": roles.join(","), title: `L${l} H${h}: ${roles.join(", ")}`,
        style: `background:${colour[roles[0]] || "#ddd"}` }, roles.length > 1 ? roles.length : "");
      td.addEventListener("click", () => { location.hash = key(l, h); });
      tr.appendChild(td);
    });
    table.appendChild(tr);
  });
  document.getElementById("grid").appendChild(table);
  filter.addEventListener("change", () => {
    document.querySelectorAll("#grid td").forEach((td) => {
      const held = td.dataset.roles.split(",");
      td.classList.toggle("dim", filter.value !== "" && !held.includes(filter.value));
    });
  });

  function drawPattern(name, l, h) {
    const p = data.patterns[name];
    const box = el("div", { class: "pattern" });
    box.appendChild(el("div", {}, name === "natural" ? "natural text" : "repeated sequence " +
      "(second copy x start of the first)"));
    const w = p && p.weights[l - 1] ? p.weights[l - 1][h - 1] : null;
    if (!w) { box.appendChild(el("em", {}, "not computed for this layer")); return box; }
    const cell = 10;
    const canvas = el("canvas", { width: w[0].length * cell, height: w.length * cell,
      "data-pattern": name, title: `queries ${p.queries.join(" ")}\nkeys ${p.keys.join(" ")}` });
    const ctx = canvas.getContext("2d");
    w.forEach((row, i) => row.forEach((v, j) => {
      ctx.fillStyle = `rgba(31,119,180,${Math.min(1, Math.max(0, v))})`;
      ctx.fillRect(j * cell, i * cell, cell, cell);
    }));
    box.appendChild(canvas);
    return box;
  }

  function showCard(l, h) {
    const row = byKey[key(l, h)];
    const card = document.getElementById("card");
    card.innerHTML = "";
    card.dataset.layer = l;
    card.dataset.head = h;
    document.querySelectorAll("#grid td.chosen").forEach((td) => td.classList.remove("chosen"));
    const cell = document.getElementById(`cell-${key(l, h)}`);
    if (cell) cell.classList.add("chosen");
    card.appendChild(el("h2", {}, `Layer ${l}, head ${h}`));
    if (!row) { card.appendChild(el("p", {}, "no such head")); return; }
    const roles = el("p", { class: "roles" });
    rolesOf(row).forEach((r) => roles.appendChild(
      el("span", { class: "role", "data-role": r, style: `background:${colour[r] || "#999"}` }, r)));
    card.appendChild(roles);
    if (row.not_judged) card.appendChild(el("p", { class: "not-judged" }, `not judged: ${row.not_judged.split(",").join(", ")}`));
    // scores
    const scores = el("table", { class: "scores" });
    scores.appendChild(el("tr")).append(el("th", {}, "score"), el("th", {}, "value"),
      el("th", {}, "threshold"));
    data.rules.forEach((rule) => {
      const v = row[rule.score];
      if (v === null || v === undefined) return;
      const tr = el("tr", { "data-score": rule.score });
      tr.append(el("td", {}, `${rule.score} (${rule.role})`),
        el("td", { class: "value", "data-value": String(v) }, fmt(v)),
        el("td", { class: "threshold" }, fmt(rule.threshold)));
      scores.appendChild(tr);
    });
    Object.keys(row).filter((k) => typeof row[k] === "string" && !["roles", "not_judged"].includes(k))
      .forEach((k) => {
        const tr = el("tr", { "data-score": k });
        tr.append(el("td", {}, k), el("td", { class: "value", "data-value": row[k] }, row[k]), el("td"));
        scores.appendChild(tr);
      });
    card.appendChild(scores);
    // circuits
    const edges = data.circuits.filter((c) => c.layer === l && c.head === h);
    card.appendChild(el("h3", {}, "What lifts its role keys"));
    if (!edges.length) {
      card.appendChild(el("p", {}, data.circuits.length || data.rules.length === 0 ? "no circuit rows"
        : "no circuit rows (circuits.tsv is empty or not made for this run)"));
    } else {
      const t = el("table", { class: "circuits" });
      t.appendChild(el("tr")).append(el("th", {}, "role"), el("th", {}, "keys"),
        el("th", {}, "side"), el("th", {}, "source"), el("th", {}, "lift"), el("th", {}, "share"));
      edges.forEach((c) => {
        const tr = el("tr", { class: "edge" });
        const m = /^L(\d+)\.H(\d+)$/.exec(c.source);
        const src = el("td");
        if (m) {
          const a = el("a", { href: `#L${m[1]}H${m[2]}`, class: "upstream",
            "data-layer": m[1], "data-head": m[2] }, c.source);
          src.appendChild(a);
        } else src.textContent = c.source;
        tr.append(el("td", {}, c.role), el("td", {}, c.keys), el("td", {}, c.side), src,
          el("td", { class: "lift", "data-value": String(c.lift) }, fmt(c.lift)),
          el("td", { class: "share", "data-value": String(c.share) }, fmt(c.share)));
        t.appendChild(tr);
      });
      card.appendChild(t);
    }
    const blocks = data.groups.filter((g) => g.layer === l && g.head === h);
    if (blocks.length) {
      card.appendChild(el("h3", {}, "Its role keys' lift by block and direction"));
      const t = el("table", { class: "blocks" });
      t.appendChild(el("tr")).append(el("th", {}, "keys"), el("th", {}, "side"),
        el("th", {}, "group"), el("th", {}, "lift"), el("th", {}, "share"));
      blocks.forEach((g) => {
        const tr = el("tr", { class: "block" });
        tr.append(el("td", {}, g.keys), el("td", {}, g.side), el("td", {}, g.group),
          el("td", { class: "lift", "data-value": String(g.lift) }, fmt(g.lift)),
          el("td", { class: "share", "data-value": String(g.share) }, fmt(g.share)));
        t.appendChild(tr);
      });
      card.appendChild(t);
    }
    card.appendChild(el("h3", {}, "Attention patterns"));
    card.appendChild(drawPattern("natural", l, h));
    card.appendChild(drawPattern("repeated", l, h));
  }

  function fromHash() {
    const m = /^#L(\d+)H(\d+)$/.exec(location.hash);
    if (m) showCard(Number(m[1]), Number(m[2]));
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
  document.body.dataset.ready = "1";
})();
