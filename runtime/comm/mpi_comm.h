// Private to the runtime's comm/: a job started by mpirun connects its tp group through MPI
// (mpi_comm.cpp) instead of the rendezvous directory (gloo_comm.cpp), and the helpers the two
// share. Plain C++17.
#ifndef TPCRT_COMM_MPI_COMM_H
#define TPCRT_COMM_MPI_COMM_H

#include "tpcrt/comm.h"

#include <memory>
#include <string>

namespace tpcrt {

/// Connects the ranks mpirun started (`options.world` > 1). `transport` is TPC_TRANSPORT,
/// already checked to be auto, shm or mpi: mpi moves the collectives through MPI's; auto and
/// shm through the shared-memory transport where every rank is on this machine (MPI only
/// starts it, broadcasts and barriers), auto through MPI otherwise. Null, with `error`, on
/// failure.
std::unique_ptr<Comm> connectMpi(const CommOptions &options, const std::string &transport,
                                 std::string &error);

/// This machine's name (gloo_comm.cpp).
std::string hostName();

/// Whether process `pid` of this machine has ended: gone, or a zombie its parent has not
/// reaped yet (gloo_comm.cpp).
bool processEnded(long pid);

} // namespace tpcrt

#endif // TPCRT_COMM_MPI_COMM_H
