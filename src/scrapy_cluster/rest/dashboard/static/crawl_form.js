// scrapy-cluster dashboard: the crawl request the "Submit a crawl" form describes. Pure
// functions of the form's values (no DOM), so that tests/test_rest_dashboard.py runs them in
// Node; dashboard.js calls them in the page.
"use strict";

// values: {name: string} of the form's inputs (a checkbox: true/false); nowS: epoch seconds;
// newId: makes a crawlid when none is given. Throws an Error saying what is wrong.
function buildCrawlRequest(values, nowS, newId) {
  const text = (name) => String(values[name] === undefined ? "" : values[name]).trim();
  const request = { url: text("url"), appid: text("appid"), crawlid: text("crawlid") || newId(),
    spiderid: text("spiderid") || "link", maxdepth: Number(text("maxdepth") || 0),
    priority: Number(text("priority") || 1) };
  if (text("expires_in")) request.expires = Math.floor(nowS) + Number(text("expires_in"));
  const recrawl = buildRecrawl(values, nowS);
  if (recrawl) request.recrawl = recrawl;
  const sitemaps = buildSitemaps(values);
  if (sitemaps) request.sitemaps = sitemaps;
  if (values.sitemap_any_host === true) request.sitemap_any_host = true;
  return request;
}

// The "sitemaps" field: the chosen mode ("robots" or "paths"), or the URLs of the text box
// (whitespace-separated, duplicates dropped), or null for neither (the field is left out, so
// the seed domain's default applies). A mode and URLs together are refused.
function buildSitemaps(values) {
  const mode = String(values.sitemaps === undefined ? "" : values.sitemaps).trim();
  const urls = [...new Set(String(values.sitemap_urls === undefined ? "" : values.sitemap_urls)
    .split(/\s+/).filter((url) => url))];
  if (urls.length && mode) throw new Error("give sitemap URLs or a sitemaps mode, not both");
  if (urls.length > 100) throw new Error("at most 100 sitemap URLs");
  return urls.length ? urls : (mode || null);
}

// The "recrawl" object, or null when neither an interval nor adaptive bounds are given (the
// other re-crawl inputs then must be empty too). Only what differs from the API's defaults.
function buildRecrawl(values, nowS) {
  const text = (name) => String(values[name] === undefined ? "" : values[name]).trim();
  const interval = text("recrawl_interval");
  const min = text("recrawl_min");
  const max = text("recrawl_max");
  const untilIn = text("recrawl_until_in");
  const cycles = text("recrawl_max_cycles");
  const noLinks = values.recrawl_links === false;
  const noItem = text("recrawl_not_modified") === "none";
  const estimate = values.recrawl_estimate === true;
  if (!interval && !min && !max) {
    if (untilIn || cycles || noLinks || noItem) {
      throw new Error("re-crawl needs an interval or adaptive min and max");
    }
    return null;
  }
  if (Boolean(min) !== Boolean(max)) throw new Error("adaptive re-crawl needs both min and max");
  if (estimate && !min) throw new Error("estimating change rates needs adaptive min and max");
  const recrawl = {};
  if (interval) recrawl.interval = Number(interval);
  if (min) recrawl.adaptive = { min: Number(min), max: Number(max) };
  if (min && estimate) recrawl.adaptive.estimate = true;
  if (untilIn) recrawl.until = Math.floor(nowS) + Number(untilIn);
  if (cycles) recrawl.max_cycles = Number(cycles);
  if (noLinks) recrawl.links = false;
  if (noItem) recrawl.not_modified = "none";
  return recrawl;
}

if (typeof module !== "undefined") {
  module.exports = { buildCrawlRequest, buildRecrawl, buildSitemaps };
}
