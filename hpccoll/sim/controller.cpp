// The replay's controller compiled (hpccoll/sim/compiled.py builds its input, scripts/
// install-sim.sh builds it into the module hpccoll_sim_controller): the same rules as
// hpccoll.sim.replay.Ranks, run in SimGrid's own scheduler with no actor and no Python per
// transfer.  Every computation and transfer is a SimGrid activity (a step's posting overhead a
// timer) started from the completion callback of the one before it, in the engine and on the
// hosts that the Python module built (this library links the same libsimgrid.so).
//
// A job arrives as flat arrays, every rank's steps one after the other (rank r's steps are
// rank_steps[r] .. rank_steps[r+1]-1): a step's flags, its local work in seconds, and its
// messages, those to (from) one peer already summed into one flow (send_at / recv_at: each
// step's first send / receive).  A send carries the two hosts its transfer runs between.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Exec.hpp>
#include <simgrid/s4u/Host.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py  = pybind11;
namespace sg4 = simgrid::s4u;

template <typename T> using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

namespace {

constexpr int8_t SYNC  = 1; // a barrier of the node's ranks
constexpr int8_t EMPTY = 2; // nothing to do: skipped
constexpr int8_t POSTS = 4; // has messages: the posting overhead comes first

struct Posted {        // one side of a flow that the other side has not posted yet
  int8_t side;         // 1 send, 2 receive
  double arrival_work; // the receive's on-arrival seconds
  int64_t count;
  int32_t from, to;    // the transfer's hosts (known to the send side)
};

class Replay {
public:
  Replay(py::dict job, std::vector<sg4::Host*> hosts, std::vector<sg4::Host*> rank_hosts, double overhead,
         double speed, int64_t itemsize)
      : hosts_(std::move(hosts))
      , rank_hosts_(std::move(rank_hosts))
      , ranks_(static_cast<int64_t>(rank_hosts_.size()))
      , overhead_(overhead)
      , speed_(speed)
      , itemsize_(itemsize)
      , step_(ranks_, -1)
      , pending_(ranks_, 0)
      , done_at_(ranks_, 0.0)
      , unfinished_(ranks_)
  {
    rank_steps_ = view<int64_t>(job, "rank_steps", ranks_ + 1);
    int64_t steps = rank_steps_[ranks_];
    flags_        = view<int8_t>(job, "flags", steps);
    local_        = view<double>(job, "local", steps);
    send_at_      = view<int64_t>(job, "send_at", steps + 1);
    recv_at_      = view<int64_t>(job, "recv_at", steps + 1);
    int64_t sends = send_at_[steps], recvs = recv_at_[steps];
    send_peer_    = view<int32_t>(job, "send_peer", sends);
    send_count_   = view<int64_t>(job, "send_count", sends);
    send_from_    = view<int32_t>(job, "send_from", sends);
    send_to_      = view<int32_t>(job, "send_to", sends);
    recv_peer_    = view<int32_t>(job, "recv_peer", recvs);
    recv_count_   = view<int64_t>(job, "recv_count", recvs);
    recv_work_    = view<double>(job, "recv_work", recvs);
    node_         = view<int32_t>(job, "node", ranks_);
    int64_t nodes = 0;
    for (int64_t r = 0; r < ranks_; r++)
      nodes = std::max<int64_t>(nodes, node_[r] + 1);
    members_         = view<int32_t>(job, "members", nodes);
    barrier_seconds_ = view<double>(job, "barrier_seconds", nodes);
    auto hosts_count = static_cast<int32_t>(hosts_.size());
    for (int64_t i = 0; i < sends; i++)
      if (send_peer_[i] < 0 || send_peer_[i] >= ranks_ || send_from_[i] < 0 || send_from_[i] >= hosts_count ||
          send_to_[i] < 0 || send_to_[i] >= hosts_count)
        throw std::invalid_argument("a send's peer or host is out of range");
    for (int64_t i = 0; i < recvs; i++)
      if (recv_peer_[i] < 0 || recv_peer_[i] >= ranks_)
        throw std::invalid_argument("a receive's peer is out of range");
  }

  // Runs the job to its end in the engine; (seconds from start to the last rank's end or -1 if
  // ranks were left waiting, transfers, each rank's step where it stopped).
  py::tuple run()
  {
    begun_ = sg4::Engine::get_clock();
    for (int64_t rank = 0; rank < ranks_; rank++)
      enter(rank);
    sg4::Engine::get_instance()->run();
    retired_.clear();
    double seconds = -1;
    if (unfinished_ == 0) {
      double last = 0;
      for (double at : done_at_)
        last = std::max(last, at);
      seconds = last - begun_;
    }
    return py::make_tuple(seconds, transfers_, step_);
  }

private:
  std::vector<py::object> arrays_; // the job's arrays, kept alive while read through the pointers
  const int64_t* rank_steps_;
  const int8_t* flags_;
  const double* local_;
  const int64_t *send_at_, *recv_at_;
  const int32_t *send_peer_, *send_from_, *send_to_, *recv_peer_;
  const int64_t *send_count_, *recv_count_;
  const double* recv_work_;
  const int32_t *node_, *members_;
  const double* barrier_seconds_;
  std::vector<sg4::Host*> hosts_;      // every host a transfer may run between
  std::vector<sg4::Host*> rank_hosts_; // where each rank computes
  int64_t ranks_;
  double overhead_, speed_;
  int64_t itemsize_;

  std::vector<int64_t> step_;
  std::vector<int64_t> pending_;
  std::vector<double> done_at_;
  int64_t unfinished_;
  int64_t transfers_ = 0;
  double begun_      = 0;
  std::unordered_map<uint64_t, Posted> posted_;                // (step, src, dst) -> first side
  std::unordered_map<uint64_t, std::vector<int64_t>> barriers_; // (step, node) -> ranks there
  // activities whose completion callback is running or has just run: SimGrid's kernel still
  // reads them after the callback, so each is released at the next completion
  std::vector<sg4::ActivityPtr> retired_;

  template <typename T> const T* view(py::dict const& job, const char* name, int64_t size)
  {
    auto array = job[name].cast<Array<T>>();
    if (array.ndim() != 1 || array.size() != size)
      throw std::invalid_argument(std::string("the job's array ") + name + " has " + std::to_string(array.size()) +
                                  " elements, not " + std::to_string(size));
    arrays_.push_back(array);
    return array.data();
  }

  uint64_t flow_key(int64_t s, int64_t src, int64_t dst) const
  {
    return (static_cast<uint64_t>(s) * ranks_ + src) * ranks_ + dst;
  }

  void retire(sg4::Activity* activity)
  {
    retired_.clear();
    retired_.emplace_back(activity, false); // adopts the reference taken at the start
  }

  // The posting overhead of a step: nothing else runs on the rank's host then (a step begins
  // once everything of the one before has ended, and every rank has a host of its own), so
  // it is a timer, not a computation that the host's CPU would share.
  void post(int64_t rank)
  {
    pending_[rank]++;
    simgrid::kernel::timer::Timer::set(sg4::Engine::get_clock() + overhead_, [this, rank] {
      pending_[rank]--;
      begin(rank);
    });
  }

  void compute(int64_t rank, double seconds)
  {
    if (seconds <= 0)
      return;
    sg4::ExecPtr exec = sg4::Exec::init();
    exec->set_flops_amount(seconds * speed_);
    exec->set_host(rank_hosts_[rank]);
    exec->on_this_completion_cb([this, rank](sg4::Exec const& done) {
      retire(const_cast<sg4::Exec*>(&done));
      finished(rank);
    });
    exec->add_ref();
    exec->start();
    pending_[rank]++;
  }

  void transfer(int64_t src, int64_t dst, int64_t count, double arrival_work, int32_t from, int32_t to)
  {
    transfers_++;
    sg4::CommPtr comm = sg4::Comm::sendto_init(hosts_[from], hosts_[to]);
    comm->set_payload_size(static_cast<uint64_t>(count * itemsize_));
    comm->on_this_completion_cb([this, src, dst, arrival_work](sg4::Comm const& done) {
      retire(const_cast<sg4::Comm*>(&done));
      finished(src);
      compute(dst, arrival_work); // the step goes on while there is arrival work
      finished(dst);
    });
    comm->add_ref();
    comm->start();
  }

  void enter(int64_t rank)
  {
    int64_t first = rank_steps_[rank];
    int64_t steps = rank_steps_[rank + 1] - first;
    int64_t g;
    while (true) {
      int64_t s = ++step_[rank];
      if (s >= steps) {
        done_at_[rank] = sg4::Engine::get_clock();
        unfinished_--;
        return;
      }
      g = first + s;
      if (flags_[g] & SYNC) {
        barrier(rank, s);
        return;
      }
      if (not(flags_[g] & EMPTY))
        break;
    }
    if ((flags_[g] & POSTS) && overhead_ > 0)
      post(rank); // then begin()
    else
      begin(rank);
  }

  void begin(int64_t rank)
  {
    int64_t s = step_[rank];
    int64_t g = rank_steps_[rank] + s;
    for (int64_t i = send_at_[g]; i < send_at_[g + 1]; i++)
      meet(s, rank, send_peer_[i], 1, send_count_[i], 0.0, send_from_[i], send_to_[i]);
    for (int64_t i = recv_at_[g]; i < recv_at_[g + 1]; i++)
      meet(s, recv_peer_[i], rank, 2, recv_count_[i], recv_work_[i], -1, -1);
    pending_[rank] += (send_at_[g + 1] - send_at_[g]) + (recv_at_[g + 1] - recv_at_[g]);
    compute(rank, local_[g]);
    if (pending_[rank] == 0)
      enter(rank);
  }

  void meet(int64_t s, int64_t src, int64_t dst, int8_t side, int64_t count, double arrival_work, int32_t from,
            int32_t to)
  {
    uint64_t key = flow_key(s, src, dst);
    auto other   = posted_.find(key);
    if (other == posted_.end()) {
      posted_.emplace(key, Posted{side, arrival_work, count, from, to});
      return;
    }
    Posted first = other->second;
    posted_.erase(other);
    double work = side == 2 ? arrival_work : first.arrival_work;
    if (side == 2) {
      from = first.from;
      to   = first.to;
    }
    transfer(src, dst, count, work, from, to);
  }

  void barrier(int64_t rank, int64_t s)
  {
    int32_t node  = node_[rank];
    uint64_t key  = static_cast<uint64_t>(s) * ranks_ + node;
    auto& waiting = barriers_[key];
    waiting.push_back(rank);
    if (static_cast<int32_t>(waiting.size()) < members_[node])
      return;
    std::vector<int64_t> members = std::move(waiting);
    barriers_.erase(key);
    for (int64_t member : members) {
      compute(member, barrier_seconds_[node]);
      if (pending_[member] == 0)
        enter(member);
    }
  }

  void finished(int64_t rank)
  {
    if (--pending_[rank] == 0)
      enter(rank);
  }
};

std::vector<sg4::Host*> by_name(const std::vector<std::string>& names)
{
  std::vector<sg4::Host*> hosts;
  hosts.reserve(names.size());
  for (auto const& name : names)
    hosts.push_back(sg4::Host::by_name(name));
  return hosts;
}

py::tuple replay(py::dict job, const std::vector<std::string>& hosts, const std::vector<std::string>& rank_hosts,
                 double overhead, double speed, int64_t itemsize)
{
  Replay replay(std::move(job), by_name(hosts), by_name(rank_hosts), overhead, speed, itemsize);
  return replay.run();
}

} // namespace

PYBIND11_MODULE(hpccoll_sim_controller, module)
{
  module.doc() = "hpccoll's replay controller compiled (see hpccoll/sim/compiled.py)";
  module.def("replay", &replay, py::arg("job"), py::arg("hosts"), py::arg("rank_hosts"), py::arg("overhead"),
             py::arg("speed"), py::arg("itemsize"),
             "Run one flattened job in the current SimGrid engine: (seconds or -1 if ranks were left "
             "waiting, transfers, each rank's last step)");
}
