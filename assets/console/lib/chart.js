// Charts drawn as SVG by our own small code: stacked bars (one bar per time bucket, one colour
// per series) and a horizontal share bar. Heights use floats for drawing only; every bar keeps
// its exact decimal in `data-value` and in its tooltip.

import { h, fmtNumber, fmtCompact } from "./dom.js";

/** Series colours (contrast ≥ 3:1 against the white plot). */
export const PALETTE = ["#1f5fa8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#4d4d4d"];

/** Below this viewport width the chart is drawn for a phone (see `GEOMETRY`). */
export const COMPACT_MAX_WIDTH = 640;

/**
 * The drawing's size in SVG units. The SVG scales to its card's width, so at a phone's width
 * the wide drawing would shrink its 11 px labels to about 5 px: the compact one is drawn about
 * as wide as a phone's card, with at most 4 bucket labels, slanted, and short axis numbers.
 */
const GEOMETRY = {
  wide: { W: 720, H: 300, pad: { left: 64, right: 12, top: 12, bottom: 56 }, labels: 12, slant: false },
  compact: { W: 360, H: 250, pad: { left: 44, right: 8, top: 10, bottom: 58 }, labels: 4, slant: true },
};

const compactQuery = () =>
  typeof matchMedia === "function" ? matchMedia(`(max-width: ${COMPACT_MAX_WIDTH}px)`) : null;

/** An axis number: compact notation (1.2K, 1.2万) on a phone. */
function axisNumber(v, compact) {
  return compact ? fmtCompact(v) : fmtNumber(v, 2);
}

/**
 * A stacked bar chart. `buckets`: `[{key, label, short?}]` (`short`: the label at a phone's
 * width); `series`: `[{name, values: {bucketKey: decimalString}}]`; `title`: its accessible
 * name (a string). Returns an `<svg>`, drawn again when the viewport crosses the phone width.
 */
export function stackedBars({ buckets, series, title, unit }) {
  const svg = h("svg", {
    class: "chart",
    role: "img",
    "aria-label": title,
    preserveAspectRatio: "xMidYMid meet",
  });
  const mq = compactQuery();
  const draw = () => drawBars(svg, { buckets, series, unit }, mq?.matches ? GEOMETRY.compact : GEOMETRY.wide);
  draw();
  if (mq) {
    const onChange = () => {
      // The page moved on: forget this chart.
      if (!svg.isConnected && svg.dataset.drawn) return mq.removeEventListener("change", onChange);
      draw();
    };
    mq.addEventListener("change", onChange);
  }
  return svg;
}

function drawBars(svg, { buckets, series, unit }, g) {
  const { W, H, pad: PAD } = g;
  const compact = g === GEOMETRY.compact;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.dataset.layout = compact ? "compact" : "wide";
  svg.dataset.drawn = "1";
  const totals = buckets.map((b) =>
    series.reduce((acc, s) => acc + Number(s.values[b.key] || 0), 0),
  );
  const max = niceMax(Math.max(0, ...totals));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const slot = plotW / Math.max(1, buckets.length);
  const barW = Math.max(compact ? 1 : 2, Math.min(48, slot * 0.7));
  const y = (v) => PAD.top + plotH - (max === 0 ? 0 : (v / max) * plotH);
  // Grid and axis labels (numbers: data).
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    const gy = y(v);
    svg.appendChild(h("line", { x1: PAD.left, x2: W - PAD.right, y1: gy, y2: gy, class: "grid" }));
    svg.appendChild(
      h("text", { x: PAD.left - 6, y: gy + 4, "text-anchor": "end", class: "axis" }, axisNumber(v, compact)),
    );
  }
  const labelEvery = Math.ceil(buckets.length / g.labels);
  buckets.forEach((b, i) => {
    const x = PAD.left + i * slot + (slot - barW) / 2;
    let acc = 0;
    series.forEach((s, si) => {
      const exact = s.values[b.key];
      const v = Number(exact || 0);
      if (!(v > 0)) return;
      const top = y(acc + v);
      const height = y(acc) - top;
      acc += v;
      svg.appendChild(
        h(
          "rect",
          {
            x,
            y: top,
            width: barW,
            height: Math.max(0.5, height),
            fill: PALETTE[si % PALETTE.length],
            class: "bar",
            dataset: { value: exact, series: s.name, bucket: b.key },
          },
          h("title", {}, `${b.label} · ${s.name}: ${fmtNumber(exact, 4)} ${unit}`),
        ),
      );
    });
    if (i % labelEvery === 0) {
      const lx = x + barW / 2;
      const ly = H - PAD.bottom + 16;
      svg.appendChild(
        h(
          "text",
          g.slant
            ? { x: lx, y: ly, "text-anchor": "end", class: "axis", transform: `rotate(-35 ${lx} ${ly})` }
            : { x: lx, y: ly, "text-anchor": "middle", class: "axis" },
          compact && b.short ? b.short : b.label,
        ),
      );
    }
  });
}

/** A legend for `series` names. */
export function legend(names) {
  return h(
    "ul",
    { class: "legend" },
    names.map((n, i) =>
      h("li", {}, h("span", { class: "swatch", "aria-hidden": "true", dataset: { color: i % PALETTE.length } }), n),
    ),
  );
}

/** One horizontal bar split into parts `[{name, value}]` (exact decimal strings). */
export function shareBar(parts, title) {
  const total = parts.reduce((a, p) => a + Number(p.value || 0), 0);
  const svg = h("svg", { class: "share", viewBox: "0 0 720 28", role: "img", "aria-label": title, preserveAspectRatio: "none" });
  let x = 0;
  parts.forEach((p, i) => {
    const w = total === 0 ? 0 : (Number(p.value) / total) * 720;
    if (w > 0) {
      svg.appendChild(
        h(
          "rect",
          { x, y: 0, width: w, height: 28, fill: PALETTE[i % PALETTE.length], dataset: { value: p.value, series: p.name } },
          h("title", {}, `${p.name}: ${fmtNumber(p.value, 4)}`),
        ),
      );
    }
    x += w;
  });
  return svg;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
