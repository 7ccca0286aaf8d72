set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K-default/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.733049124048073 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 28.80059497842348
20 33.29703914546753
30 44.183720856334816
40 68.24705245937662
e
