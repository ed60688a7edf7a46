// Deliberately empty. material's offline plugin adds https://unpkg.com/iframe-worker/shim to every page (so that
// search runs from file:// URLs) unless a polyfill whose name holds "iframe-worker" is listed: this one is
// (mkdocs.yml, extra.polyfills), so the built site loads nothing from outside it. Search works when the site is
// served, e.g. `python -m http.server -d site`; from file:// URLs it does not.
