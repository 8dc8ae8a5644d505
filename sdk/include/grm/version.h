/* grm/version.h - the plugin ABI version and the package version.
 *
 * The ABI pair (GRM_ABI_MAJOR, GRM_ABI_MINOR) is the contract between grmhost and
 * plugins; it moves independently of the package version (STYLE.md §5.1). These two
 * defines are its only definition: configure reads them into grm-sdk.pc's Version, so
 * `pkg-config --modversion grm-sdk` prints the ABI an installed SDK provides. */
#ifndef GRM_VERSION_H
#define GRM_VERSION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Major: bumped when anything in a public struct or ops table is removed, reordered,
 * resized or redefined. A host refuses plugins of another major. */
#define GRM_ABI_MAJOR 1
/* Minor: bumped when an op or field is appended. A host accepts plugins of its own
 * minor or older; it refuses a plugin built for a newer minor. */
#define GRM_ABI_MINOR 13

/* History of the ABI (append-only within a major):
 *   1.0  the seven kinds, the host API, declared parameters.
 *   1.1  grm_reader_ops.stats and grm_emb_ops.stats appended (optional counters).
 *   1.2  grm_dense_ctx.times appended (token timestamps of jagged sequences).
 *   1.3  grm_emb_ops.flags appended (GRM_EMB_ANY_ID: the store takes any int64 key, so
 *        the host may merge tables into one key space).
 *   1.4  grm_plugin_info.devices (the former reserved field: 0 means the CPU only) and
 *        grm_host_api.backend appended (grm/backend.h: the pipeline's compute backend,
 *        [pipeline] device).
 *   1.5  GRM_KIND_HEAD and grm/head.h: heads are a kind of their own; grm_loss_io gains
 *        batch, step and the item table's rows with their slots (the head gathers the
 *        targets' and negatives' rows and sums their gradients itself). Dense-kind heads
 *        of 1.0-1.4 still load and run.
 *   1.6  grm_emb_ops.prefetch appended (optional: a tiered store brings the next batch's
 *        rows into its cache while the current batch trains).
 *   1.7  grm_backend_iface.hstu_attn_ws_bytes, hstu_attn_fwd and hstu_attn_bwd appended
 *        (optional), with grm_hstu_attn_args: the HSTU attention has one signature on
 *        every device; the core's host returns the `cpu` backend outside a run.
 *   1.8  grm_head_ops.score_rows appended (optional): the head puts the catalog's rows
 *        into the form a dot product ranks as its logits do (cosine heads normalise them),
 *        so evaluation, recommend and export rank as the head trains.
 *   1.9  grm_opt_ops.set_lr_scale appended (optional): the host scales an optimizer's
 *        learning rate step by step ([train] lr_warmup, lr_decay).
 *   1.10 grm_emb_ops.tensor_rows and load_rows, grm_ckpt_ops.save_rows and load_rows
 *        appended (optional): a checkpoint moves between a store and its file a range of
 *        rows at a time, so a table larger than memory is saved and restored in bounded
 *        memory.
 *   1.11 grm_emb_ops.placement appended (optional): whether a store's parameter only
 *        places rows (a tiered table's cache size and backing directory), which a resume
 *        may change without training another model.
 *   1.12 grm_emb_ops.trim appended (optional): the host's data thread brings a tiered
 *        store's cache back under its budget after each prefetch, keeping the rows of the
 *        batches in flight, so evictions and write-backs leave the trainer's time.
 *   1.13 grm_ckpt_ops.load_rows_interleaved appended (optional) and the grm_emb_ops.flags
 *        bit GRM_EMB_LOAD_INTERLEAVED: a format hands the pieces of tensors of as many
 *        rows over a range of each in turn, and a store that takes them so restores a
 *        table larger than memory in one pass over what it writes. */

/* The package (release) version, for humans and pkg-config. */
#define GRM_VERSION_STRING "0.1.0"

#ifdef __cplusplus
}
#endif
#endif /* GRM_VERSION_H */
