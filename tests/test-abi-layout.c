/* tests/test-abi-layout.c - the layout of every public struct of ABI major 1, pinned
 * (STYLE.md §5.9). A change to this table is a deliberate act, made in the same commit as
 * the ABI version bump: appending a member at the end of an ops table moves only its
 * size (a minor bump); anything else here moving is a major bump. Values are for LP64
 * (x86-64, aarch64); other data models skip. */
#include <stddef.h>
#include <stdio.h>

#include <grm/grm.h>
#include <grm/rng.h>

#include "tap.h"

#define SZ(t, n) tap_ok(sizeof(t) == (n), "sizeof(%s) == %d (is %zu)", #t, n, sizeof(t))
#define OF(t, m, n)                                                                        \
    tap_ok(offsetof(t, m) == (n), "offsetof(%s, %s) == %d (is %zu)", #t, #m, n,            \
           offsetof(t, m))

int main(void)
{
    if (sizeof(void *) != 8 || sizeof(long) != 8) tap_skip_all("layout table is for LP64");
    tap_plan(209);
    SZ(grm_device, 8);
    SZ(grm_tensor, 56);
    OF(grm_tensor, dtype, 8);
    OF(grm_tensor, ndim, 12);
    OF(grm_tensor, shape, 16);
    OF(grm_tensor, device, 48);
    SZ(grm_named_tensor, 64);
    OF(grm_named_tensor, tensor, 8);
    SZ(grm_column, 40);
    OF(grm_column, type, 8);
    OF(grm_column, rows, 16);
    OF(grm_column, values, 24);
    OF(grm_column, offsets, 32);
    SZ(grm_field, 16);
    SZ(grm_schema, 16);
    OF(grm_schema, nfields, 4);
    OF(grm_schema, fields, 8);
    SZ(grm_chunk, 24);
    OF(grm_chunk, ncols, 4);
    OF(grm_chunk, rows, 8);
    OF(grm_chunk, cols, 16);
    SZ(grm_jagged, 72);
    OF(grm_jagged, offsets, 56);
    OF(grm_jagged, batch, 64);
    SZ(grm_kjt, 56);
    OF(grm_kjt, keys, 8);
    OF(grm_kjt, batch, 16);
    OF(grm_kjt, offsets, 24);
    OF(grm_kjt, ids, 32);
    OF(grm_kjt, weights, 40);
    OF(grm_kjt, timestamps, 48);
    SZ(grm_batch, 72);
    OF(grm_batch, ntasks, 4);
    OF(grm_batch, samples, 8);
    OF(grm_batch, tokens, 16);
    OF(grm_batch, group_ids, 24);
    OF(grm_batch, sparse, 32);
    OF(grm_batch, dense, 40);
    OF(grm_batch, ndense, 48);
    OF(grm_batch, labels, 56);
    OF(grm_batch, targets, 64);
    SZ(grm_int_list, 520);
    SZ(grm_str_list, 520);
    SZ(grm_param_decl, 64);
    OF(grm_param_decl, type, 8);
    OF(grm_param_decl, required, 12);
    OF(grm_param_decl, offset, 16);
    OF(grm_param_decl, def, 24);
    OF(grm_param_decl, min, 32);
    OF(grm_param_decl, max, 40);
    OF(grm_param_decl, choices, 48);
    OF(grm_param_decl, help, 56);
    SZ(grm_host_api, 96);
    OF(grm_host_api, abi_major, 4);
    OF(grm_host_api, abi_minor, 6);
    OF(grm_host_api, log, 8);
    OF(grm_host_api, errorf, 16);
    OF(grm_host_api, last_error, 24);
    OF(grm_host_api, alloc, 32);
    OF(grm_host_api, free, 40);
    OF(grm_host_api, parallel_for, 48);
    OF(grm_host_api, num_threads, 56);
    OF(grm_host_api, scratch, 64);
    OF(grm_host_api, config_get, 72);
    OF(grm_host_api, comm, 80);
    OF(grm_host_api, backend, 88);
    SZ(grm_backend, 24);
    OF(grm_backend, device, 16);
    SZ(grm_backend_iface, 136);
    OF(grm_backend_iface, gemm, 104);
    OF(grm_backend_iface, hstu_attn_ws_bytes, 112);
    OF(grm_backend_iface, hstu_attn_fwd, 120);
    OF(grm_backend_iface, hstu_attn_bwd, 128);
    SZ(grm_hstu_attn_args, 144);
    OF(grm_hstu_attn_args, stream, 8);
    OF(grm_hstu_attn_args, offsets, 24);
    OF(grm_hstu_attn_args, ld, 64);
    OF(grm_hstu_attn_args, q, 72);
    OF(grm_hstu_attn_args, rab_time, 104);
    OF(grm_hstu_attn_args, time_thr, 128);
    OF(grm_hstu_attn_args, norm, 136);
    SZ(grm_plugin_info, 64);
    OF(grm_plugin_info, abi_minor, 2);
    OF(grm_plugin_info, struct_size, 4);
    OF(grm_plugin_info, kind, 8);
    OF(grm_plugin_info, devices, 12);
    OF(grm_plugin_info, name, 16);
    OF(grm_plugin_info, version, 24);
    OF(grm_plugin_info, description, 32);
    OF(grm_plugin_info, ops, 40);
    OF(grm_plugin_info, params, 48);
    OF(grm_plugin_info, config_size, 56);
    SZ(grm_reader_stats, 24);
    SZ(grm_reader_ops, 48);
    OF(grm_reader_ops, open, 8);
    OF(grm_reader_ops, schema, 16);
    OF(grm_reader_ops, next, 24);
    OF(grm_reader_ops, close, 32);
    OF(grm_reader_ops, stats, 40);
    SZ(grm_transform_ops, 48);
    OF(grm_transform_ops, create, 8);
    OF(grm_transform_ops, schema, 16);
    OF(grm_transform_ops, apply, 24);
    OF(grm_transform_ops, flush, 32);
    OF(grm_transform_ops, destroy, 40);
    SZ(grm_emb_table_spec, 40);
    OF(grm_emb_table_spec, rows, 8);
    OF(grm_emb_table_spec, dim, 16);
    OF(grm_emb_table_spec, init, 20);
    OF(grm_emb_table_spec, init_scale, 24);
    OF(grm_emb_table_spec, seed, 32);
    SZ(grm_emb_stats, 48);
    SZ(grm_emb_ops, 112);
    OF(grm_emb_ops, create, 8);
    OF(grm_emb_ops, destroy, 16);
    OF(grm_emb_ops, lookup, 24);
    OF(grm_emb_ops, update, 32);
    OF(grm_emb_ops, tensors, 40);
    OF(grm_emb_ops, load, 48);
    OF(grm_emb_ops, stats, 56);
    OF(grm_emb_ops, flags, 64);
    OF(grm_emb_ops, prefetch, 72);
    OF(grm_emb_ops, tensor_rows, 80);
    OF(grm_emb_ops, load_rows, 88);
    OF(grm_emb_ops, placement, 96);
    OF(grm_emb_ops, trim, 104);
    SZ(grm_dense_ctx, 48);
    OF(grm_dense_ctx, training, 4);
    OF(grm_dense_ctx, step, 8);
    OF(grm_dense_ctx, batch, 16);
    OF(grm_dense_ctx, offsets, 24);
    OF(grm_dense_ctx, nseq, 32);
    OF(grm_dense_ctx, times, 40);
    SZ(grm_catalog, 24);
    SZ(grm_loss_io, 192);
    OF(grm_loss_io, batch, 128);
    OF(grm_loss_io, step, 136);
    OF(grm_loss_io, item_rows, 144);
    OF(grm_loss_io, d_item_rows, 152);
    OF(grm_loss_io, nitems, 160);
    OF(grm_loss_io, pos_slots, 168);
    OF(grm_loss_io, neg_slots, 176);
    OF(grm_loss_io, grad_scale, 184);
    SZ(grm_head_ops, 72);
    OF(grm_head_ops, create, 8);
    OF(grm_head_ops, task, 24);
    OF(grm_head_ops, loss, 32);
    OF(grm_head_ops, negatives, 40);
    OF(grm_head_ops, flops, 56);
    OF(grm_head_ops, score_rows, 64);
    OF(grm_loss_io, ntasks, 4);
    OF(grm_loss_io, rows, 8);
    OF(grm_loss_io, dim, 16);
    OF(grm_loss_io, pred, 24);
    OF(grm_loss_io, d_pred, 32);
    OF(grm_loss_io, weights, 40);
    OF(grm_loss_io, labels, 48);
    OF(grm_loss_io, pos, 56);
    OF(grm_loss_io, d_pos, 64);
    OF(grm_loss_io, pos_ids, 72);
    OF(grm_loss_io, neg, 80);
    OF(grm_loss_io, d_neg, 88);
    OF(grm_loss_io, neg_ids, 96);
    OF(grm_loss_io, nneg, 104);
    OF(grm_loss_io, loss, 112);
    OF(grm_loss_io, scores, 120);
    SZ(grm_dense_ops, 88);
    OF(grm_dense_ops, create, 8);
    OF(grm_dense_ops, destroy, 16);
    OF(grm_dense_ops, out_dim, 24);
    OF(grm_dense_ops, forward, 32);
    OF(grm_dense_ops, backward, 40);
    OF(grm_dense_ops, params, 48);
    OF(grm_dense_ops, flops, 56);
    OF(grm_dense_ops, loss_kind, 64);
    OF(grm_dense_ops, loss, 72);
    OF(grm_dense_ops, negatives, 80);
    SZ(grm_opt_ops, 56);
    OF(grm_opt_ops, create, 8);
    OF(grm_opt_ops, destroy, 16);
    OF(grm_opt_ops, state_floats, 24);
    OF(grm_opt_ops, step, 32);
    OF(grm_opt_ops, row_step, 40);
    OF(grm_opt_ops, set_lr_scale, 48);
    SZ(grm_optimizer, 16);
    SZ(grm_ckpt_ops, 80);
    OF(grm_ckpt_ops, create, 8);
    OF(grm_ckpt_ops, destroy, 16);
    OF(grm_ckpt_ops, extension, 24);
    OF(grm_ckpt_ops, save, 32);
    OF(grm_ckpt_ops, load, 40);
    OF(grm_ckpt_ops, meta, 48);
    OF(grm_ckpt_ops, save_rows, 56);
    OF(grm_ckpt_ops, load_rows, 64);
    OF(grm_ckpt_ops, load_rows_interleaved, 72);
    SZ(grm_comm_ops, 80);
    OF(grm_comm_ops, create, 8);
    OF(grm_comm_ops, destroy, 16);
    OF(grm_comm_ops, rank, 24);
    OF(grm_comm_ops, size, 32);
    OF(grm_comm_ops, allreduce, 40);
    OF(grm_comm_ops, allgather, 48);
    OF(grm_comm_ops, alltoallv, 56);
    OF(grm_comm_ops, broadcast, 64);
    OF(grm_comm_ops, barrier, 72);
    SZ(grm_comm_handle, 16);
    tap_ok(GRM_ABI_MAJOR == 1 && GRM_ABI_MINOR == 13, "this table pins ABI 1.13 (is %d.%d)",
           GRM_ABI_MAJOR, GRM_ABI_MINOR);
    tap_ok(GRM_DTYPE_F32 == 1 && GRM_DTYPE_U8 == 6 && GRM_COL_LIST_F32 == 5
               && GRM_KIND_COMM == 7 && GRM_PARAM_STR_LIST == 7 && GRM_EINTERNAL == 10
               && GRM_LOSS_RETRIEVAL == 2 && GRM_REDUCE_MIN == 2
               && GRM_HSTU_NORM_LENGTH == 1 && GRM_EMB_ANY_ID == 1
               && GRM_EMB_LOAD_INTERLEAVED == 2,
           "enum values are pinned (dtype, coltype, kind, param type, status, loss, reduce, "
           "store flags)");
    tap_ok(grm_dtype_size(GRM_DTYPE_F32) == sizeof(float)
               && grm_dtype_size(GRM_DTYPE_F16) == sizeof(uint16_t)
               && grm_dtype_size(GRM_DTYPE_BF16) == sizeof(uint16_t)
               && grm_dtype_size(GRM_DTYPE_I32) == sizeof(int32_t)
               && grm_dtype_size(GRM_DTYPE_I64) == sizeof(int64_t)
               && grm_dtype_size(GRM_DTYPE_U8) == sizeof(uint8_t)
               && grm_dtype_size(0) == 0 && grm_dtype_size(7) == 0,
           "grm_dtype_size is the C size of each dtype's element, 0 for 0 and 7");
    return tap_done();
}
