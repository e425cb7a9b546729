//! `stats`, `check`, `gc`.

use serde_json::json;
use undertext::import::inventory;

use super::args::{CheckArgs, DeleteArgs, JsonArg};
use super::out::{self, bytes, num};
use super::{Cli, CliError, CliResult};

/// `stats`: store sizes, and what the owner's chats hold.
pub fn stats(cli: &Cli, a: &JsonArg) -> CliResult {
    let store = out::open_existing(cli)?;
    let s = store.stats()?;
    let inv = inventory(&store, &cli.owner)?;
    let dedup = if inv.archive_unique_bytes == 0 {
        1.0
    } else {
        inv.archived_bytes as f64 / inv.archive_unique_bytes as f64
    };
    if a.json {
        let per_format: serde_json::Map<String, serde_json::Value> = inv
            .per_format
            .iter()
            .map(|(k, f)| {
                let name = if k.is_empty() { "(not imported)".to_string() } else { k.clone() };
                (name, json!({"sessions": f.sessions, "messages": f.messages, "tool_results": f.tool_results, "tool_result_bytes": f.tool_result_bytes}))
            })
            .collect();
        return out::print_json(&json!({
            "store": cli.store.display().to_string(), "owner": cli.owner,
            "segments": s.segments, "log_bytes": s.log_bytes, "log_file_bytes": s.log_file_bytes,
            "index_bytes": s.index_bytes, "indexed_blobs": s.indexed_blobs,
            "chats": inv.chats, "messages": inv.messages, "tool_results": inv.tool_results,
            "archived_results": inv.archived_results, "archives": inv.archives,
            "archived_bytes": inv.archived_bytes, "archive_unique_bytes": inv.archive_unique_bytes,
            "dedup_ratio": dedup, "per_format": per_format,
        }));
    }
    println!("store {}  (owner {:?})", cli.store.display(), cli.owner);
    println!(
        "  log        {} in {} segment(s) ({} of files, preallocation included)",
        bytes(s.log_bytes),
        s.segments,
        bytes(s.log_file_bytes)
    );
    println!("  index      {}  ({} blobs indexed)", bytes(s.index_bytes), num(s.indexed_blobs));
    println!(
        "  chats      {}  messages {}  tool results {}",
        num(inv.chats),
        num(inv.messages),
        num(inv.tool_results)
    );
    println!(
        "  archives   {} results archived → {} distinct archives; {} → {} stored (dedup {dedup:.2}×)",
        num(inv.archived_results),
        num(inv.archives),
        bytes(inv.archived_bytes),
        bytes(inv.archive_unique_bytes)
    );
    for (k, f) in &inv.per_format {
        let name = if k.is_empty() { "(not imported)" } else { k };
        println!(
            "  {name:<16} sessions {:>5}  messages {:>7}  tool results {:>6}",
            num(f.sessions),
            num(f.messages),
            num(f.tool_results)
        );
    }
    Ok(())
}

/// `check [--rebuild]`: every checksum of the log; non-zero exit when something is damaged.
pub fn check(cli: &Cli, a: &CheckArgs) -> CliResult {
    let store = out::open_existing(cli)?;
    let r = store.check()?;
    if a.rebuild && r.is_ok() {
        store.rebuild_index()?;
    }
    if a.json {
        out::print_json(&json!({
            "ok": r.is_ok(), "segments": r.segments, "batches": r.batches, "records": r.records, "blobs": r.blobs,
            "rebuilt": a.rebuild && r.is_ok(),
            "problems": r.problems.iter().map(|p| json!({"segment": p.segment, "offset": p.offset, "reason": p.reason})).collect::<Vec<_>>(),
        }))?;
    } else {
        println!(
            "{} segment(s), {} batches, {} records, {} blobs verified",
            num(r.segments),
            num(r.batches),
            num(r.records),
            num(r.blobs)
        );
        for p in &r.problems {
            println!("  damaged: segment {} offset {}: {}", p.segment, p.offset, p.reason);
        }
        if a.rebuild && r.is_ok() {
            println!("index rebuilt from the log");
        }
    }
    if r.is_ok() {
        if !a.json {
            println!("clean");
        }
        Ok(())
    } else {
        Err(CliError(format!(
            "{} damaged frame(s) in the log{}",
            r.problems.len(),
            if a.rebuild { "; index not rebuilt" } else { "" }
        )))
    }
}

/// `gc`: rewrites the log without deleted chats and the blobs only they used (offline: the
/// store must not be open elsewhere).
pub fn gc(cli: &Cli, a: &JsonArg) -> CliResult {
    let opts = undertext::Options { create_if_missing: false, ..undertext::Options::default() };
    let r = undertext::Store::gc(&cli.store, opts).map_err(|e| match e {
        undertext::Error::NotFound { .. } => CliError(format!(
            "no store at {} (run `undertext demo` or `undertext import PATH` to create one, or pass --store DIR)",
            cli.store.display()
        )),
        other => other.into(),
    })?;
    if a.json {
        return out::print_json(&json!({
            "deleted_chats": r.deleted_chats, "records_before": r.records_before, "records_after": r.records_after,
            "blobs_removed": r.blobs_removed, "log_bytes_before": r.log_bytes_before, "log_bytes_after": r.log_bytes_after,
        }));
    }
    println!(
        "gc: {} deleted chat(s) dropped, {} blob(s) removed; records {} → {}; log {} → {}",
        num(r.deleted_chats),
        num(r.blobs_removed),
        num(r.records_before),
        num(r.records_after),
        bytes(r.log_bytes_before),
        bytes(r.log_bytes_after)
    );
    Ok(())
}

/// `delete CHAT…`: deletes chats of the owner (their space comes back with `gc`).
pub fn delete(cli: &Cli, a: &DeleteArgs) -> CliResult {
    let store = out::open_existing(cli)?;
    for c in &a.chats {
        let id = out::chat(cli, &store, c)?.id();
        store.delete_chat(&cli.owner, id)?;
        println!("deleted {id}");
    }
    store.close()?;
    Ok(())
}
