package demo

import "fmt"

// The dynamic-fractions story (jobspecs/demo/fractions), the seeds'
// two-GPU case on the demo's node: two notebooks of request 0.5 and limit
// 1.0 are bound to one GPU and both burst, one as a guest on an idle GPU;
// a whole-GPU job arrives and Nomad gives it that GPU; the guest moves
// back home, the borrower is reclaimed, and the whole-GPU job runs alone.
const (
	fractionsDir   = "jobspecs/demo/fractions"
	storyNotebookA = fractionsDir + "/notebook-a.nomad.hcl"
	storyNotebookB = fractionsDir + "/notebook-b.nomad.hcl"
	storyWholeGPU  = fractionsDir + "/train.nomad.hcl"
)

// storyStoppedFirst are the examples the story stops to free their GPUs.
var storyStoppedFirst = []string{"notebook", "training"}

// fractionVars are the input variables of the story's job files.
type fractionVars struct {
	// Simload is the gpushare-simload binary; ProcessDir the plugin's
	// simulated_process_dir.
	Simload, ProcessDir string
}

// hcl is the variables as a -var-file body.
func (v fractionVars) hcl() string {
	return fmt.Sprintf("simload = %q\nprocess_dir = %q\n", v.Simload, v.ProcessDir)
}

// storyStep is one command of the story, as the welcome prints it.
type storyStep struct {
	command, what string
}

// fractionStory is what `make demo` prints to play the story. The demo's
// examples hold three GPUs (the inference replicas fill one, the notebook
// example takes a quarter of another, training a third). The story needs
// three idle: the GPU kept in the share family as the landing place takes
// the notebooks, the lowest-ordered idle whole GPU hosts the guest, and
// another becomes the next landing place once the first is full.
var fractionStory = []storyStep{
	{"nomad job stop " + storyStoppedFirst[0], "the story needs three idle GPUs:"},
	{"nomad job stop " + storyStoppedFirst[1], "they settle in seconds (one shared, two whole)"},
	{"nomad job run " + storyNotebookA, "half a GPU, limit 1.0: bursts to 68 GiB"},
	{"nomad job run " + storyNotebookB, "same GPU for Nomad; runs as a guest on the idle GPU"},
	{"nomad job run " + storyWholeGPU, "takes the guest's GPU: the guest moves home, the borrower is reclaimed"},
}
