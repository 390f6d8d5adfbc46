//! `gpuclaim review`: read the objects and the review, answer with the engine, print the response.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use gpuclaim_engine::objects::load_objects;
use gpuclaim_engine::review::answer_review;

pub struct Options {
    pub objects: PathBuf,
    pub review: Option<PathBuf>,
    pub controller_namespace: String,
    pub pretty: bool,
    pub show_patch: bool,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    let path = options.objects.display();
    let text = std::fs::read_to_string(&options.objects).with_context(|| format!("failed to read objects {path}"))?;
    let objects = load_objects(&text, &options.controller_namespace).map_err(|e| anyhow!("objects {path}: {e}"))?;

    let (name, text) = read_review(options.review.as_deref())?;
    let review: serde_json::Value =
        gpuclaim_engine::yaml::from_str(&text).map_err(|e| anyhow!("review {name}: not valid JSON or YAML: {e}"))?;
    let (response, outcome) = answer_review(&objects.view, &review).map_err(|e| anyhow!("review {name}: {e}"))?;

    let out = if options.pretty { serde_json::to_string_pretty(&response) } else { serde_json::to_string(&response) };
    println!("{}", out.expect("JSON values always serialize"));
    eprintln!("{outcome}");
    if let (true, Some(patch)) = (options.show_patch, response.pointer("/response/patch").and_then(|p| p.as_str())) {
        eprintln!("patch (decoded):\n{}", decode_patch(patch)?);
    }
    Ok(())
}

fn read_review(path: Option<&Path>) -> anyhow::Result<(String, String)> {
    match path {
        None => read_stdin(),
        Some(p) if p == Path::new("-") => read_stdin(),
        Some(p) => {
            let name = p.display().to_string();
            let text = std::fs::read_to_string(p).with_context(|| format!("failed to read review {name}"))?;
            Ok((name, text))
        }
    }
}

fn read_stdin() -> anyhow::Result<(String, String)> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text).context("failed to read the review from standard input")?;
    Ok(("<stdin>".to_owned(), text))
}

fn decode_patch(patch: &str) -> anyhow::Result<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).context("the patch is not base64")?;
    let operations: serde_json::Value = serde_json::from_slice(&bytes).context("the patch is not JSON")?;
    Ok(serde_json::to_string_pretty(&operations).expect("JSON values always serialize"))
}
