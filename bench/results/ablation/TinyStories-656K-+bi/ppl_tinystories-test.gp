set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-+bi/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.733049124048073 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 31.69054120718602
20 41.62097123682262
30 66.20005760298548
40 112.53026863184304
e
