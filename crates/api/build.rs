//! The dashboard (web/, TypeScript) is bundled by `make web` into web/dist
//! and embedded in the binary; say so clearly when it has not been built.

use std::path::Path;

fn main() {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/dist");
    for f in ["index.html", "app.js", "app.css"] {
        let p = dist.join(f);
        println!("cargo:rerun-if-changed={}", p.display());
        if !p.exists() {
            panic!(
                "the dashboard is not built ({} is missing): run `make web` (npm ci && npm run build in web/) first",
                p.display()
            );
        }
    }
}
