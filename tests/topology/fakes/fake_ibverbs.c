/* A stand-in libibverbs.so.1 for tests: mlx5_0 (one InfiniBand port, active, 4x EDR) and
 * rxe0 (soft-RoCE: one Ethernet port, active, 1x at 10 Gb/s), a device hwloc cannot place. */
#include <infiniband/verbs.h>
#include <string.h>

#undef ibv_get_device_list
#undef ibv_query_port

static struct ibv_device devices[2];
static struct ibv_device *list[3];
static struct ibv_context contexts[2];

struct ibv_device **ibv_get_device_list(int *num_devices) {
  strcpy(devices[0].name, "mlx5_0");
  strcpy(devices[1].name, "rxe0");
  list[0] = &devices[0];
  list[1] = &devices[1];
  list[2] = NULL;
  *num_devices = 2;
  return list;
}
void ibv_free_device_list(struct ibv_device **devs) {
  (void)devs;
}
const char *ibv_get_device_name(struct ibv_device *device) {
  return device->name;
}
struct ibv_context *ibv_open_device(struct ibv_device *device) {
  struct ibv_context *context = &contexts[device == &devices[0] ? 0 : 1];
  context->device = device;
  return context;
}
int ibv_close_device(struct ibv_context *context) {
  (void)context;
  return 0;
}
int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
  (void)context;
  memset(attr, 0, sizeof *attr);
  attr->phys_port_cnt = 1;
  return 0;
}
int ibv_query_port(struct ibv_context *context, uint8_t port, struct _compat_ibv_port_attr *out) {
  struct ibv_port_attr *attr = (struct ibv_port_attr *)out;
  if (port != 1) return 22; /* EINVAL */
  memset(attr, 0, sizeof *attr);
  attr->state = IBV_PORT_ACTIVE;
  if (context->device == &devices[0]) {
    attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
    attr->active_width = 2;  /* 4x */
    attr->active_speed = 32; /* EDR */
  } else {
    attr->link_layer = IBV_LINK_LAYER_ETHERNET;
    attr->active_width = 1; /* 1x */
    attr->active_speed = 4; /* 10 Gb/s */
  }
  return 0;
}
