// transports/nccl/nccl_comm.h in a build without NCCL: every call says so.
#include "transports/nccl/nccl_comm.h"

namespace rcoll::nccl {
namespace {

Status none() { return Status(ErrorCode::kUnsupported, "this build of rcoll has no NCCL (built without NCCL or the CUDA toolkit)"); }

}  // namespace

struct Comm::Impl {};

bool built() { return false; }
std::string version() { return "none"; }
bool revocable() { return false; }
const char* to_string(CallKind) { return "nccl"; }
Result<std::string> new_unique_id() { return none(); }
Comm::Comm(const Config& config) : config_(config) {}
Comm::~Comm() = default;
Result<std::unique_ptr<Comm>> Comm::create(std::string_view, const Config&) { return none(); }
Result<uint64_t> Comm::issue(const std::vector<Call>&, const Waiter&) { return none(); }
Result<uint64_t> Comm::issue_confirmation(uint64_t, const Waiter&, int) { return none(); }
bool Comm::fingerprints_agree() const { return false; }
Status Comm::copy(void*, const void*, size_t) { return none(); }
Result<uint64_t> Comm::record_ticket() { return none(); }
Result<bool> Comm::poll(uint64_t) { return none(); }
void Comm::abort(const Status&) {}
bool Comm::aborted() const { return true; }
bool Comm::stop_put_off() const { return false; }
void Comm::finish_stop() {}
void* Comm::stream() const { return nullptr; }
Status Comm::order_after_me(void*) { return none(); }
Status Comm::order_after_event(void*) { return none(); }
Status Comm::follow(Comm&) { return none(); }
Status Comm::failure(ErrorCode code, const std::string& what) const { return Status(code, what); }
bool release(std::unique_ptr<Comm>, int) { return true; }

}  // namespace rcoll::nccl
