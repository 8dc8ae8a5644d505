/* grm/grm.h - umbrella header: everything a plugin author needs. */
#ifndef GRM_GRM_H
#define GRM_GRM_H

#include <grm/version.h>
#include <grm/status.h>
#include <grm/tensor.h>
#include <grm/param.h>
#include <grm/host.h>
#include <grm/plugin.h>
#include <grm/reader.h>
#include <grm/transform.h>
#include <grm/emb.h>
#include <grm/dense.h>
#include <grm/head.h>
#include <grm/opt.h>
#include <grm/ckpt.h>
#include <grm/comm.h>
#include <grm/backend.h>

#endif /* GRM_GRM_H */
